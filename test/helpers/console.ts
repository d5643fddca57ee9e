/** Console links and a browser-like console client for tests (api/console). */
import request from 'supertest';
import { CONSOLE_LINK_PURPOSE } from '../../lib/aggregator/console/sessions.ts';
import type { TestAggregator, TestPlatform } from './platform.ts';

/** A console sign-in URL for `agg` with `role`, valid `ttlSeconds` (as bin/commands/console.ts mints it). */
export async function consoleLinkFor(platform: TestPlatform, agg: TestAggregator, role = 'admin', ttlSeconds = 600): Promise<string> {
  const types = (await platform.ctx.pool.query<{ types: string[] }>('SELECT types FROM aggregator.aggregators WHERE aggregator_id = $1', [agg.aggregatorId])).rows[0].types;
  const token = await platform.ctx.tokens.issueForPurpose(CONSOLE_LINK_PURPOSE, `console:${agg.aggregatorId}:${role}`, ttlSeconds, {
    aggregator_id: agg.aggregatorId, org_id: agg.orgId, aggregator_type: types, roles: [role],
  });
  return `${platform.url('aggregator')}/console/login?token=${encodeURIComponent(token)}`;
}

/** The whole body of a streamed answer (Server-Sent Events) as text. */
export const collectText = (res: request.Response, done: (err: Error | null, body: string) => void) => {
  let text = '';
  res.on('data', (chunk: Buffer) => { text += chunk.toString(); });
  res.on('end', () => done(null, text));
};

/** A cookie jar for one browser-like client: sign-in through the link, then the page's CSRF token. */
export class ConsoleClient {
  cookies = new Map<string, string>();
  constructor(readonly base: string) {}
  private keep(res: request.Response) {
    for (const line of (res.headers['set-cookie'] as unknown as string[] | undefined) ?? []) {
      const [pair] = line.split(';');
      const [name, ...value] = pair.split('=');
      if (value.join('=') === '') this.cookies.delete(name);
      else this.cookies.set(name, value.join('='));
    }
    return res;
  }
  cookieHeader() {
    return [...this.cookies].map(([k, v]) => `${k}=${v}`).join('; ');
  }
  async get(path: string, accept = 'text/html') {
    return this.keep(await request(this.base).get(path).set('cookie', this.cookieHeader()).set('accept', accept));
  }
  /** A GET of an event stream, read to its end (the body is the text). */
  async events(path: string) {
    return this.keep(await request(this.base).get(path).set('cookie', this.cookieHeader()).set('accept', 'text/event-stream').buffer(true).parse(collectText));
  }
  async post(path: string, form: Record<string, string | string[]>) {
    return this.keep(await request(this.base).post(path).set('cookie', this.cookieHeader()).type('form').send(form));
  }
  /** The CSRF token of the page at `path`. */
  async csrf(path = '/console/uploads') {
    const res = await this.get(path);
    return /name="_csrf" value="([^"]+)"/.exec(res.text)![1];
  }
  async signIn(link: string) {
    const url = new URL(link);
    const page = await this.get(url.pathname + url.search);
    const token = /name="token" value="([^"]+)"/.exec(page.text)![1];
    const csrf = /name="_csrf" value="([^"]+)"/.exec(page.text)![1];
    return this.post('/console/login', { _csrf: csrf, token });
  }
}
