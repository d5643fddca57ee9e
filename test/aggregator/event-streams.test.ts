/**
 * Event streams are bounded (issue 29, Trust II; api/http/event-stream.ts): at most
 * EVENT_STREAMS_PER_CALLER per aggregator and EVENT_STREAMS_MAX per process (429 with Retry-After
 * beyond), EVENT_STREAM_MAX_SECONDS per stream (then a `reconnect` event), and the caller checked
 * again before each read: an expired token, a suspended aggregator or a console session signed out
 * ends the stream (a `denied` event). Streams of pending jobs, which never end by themselves.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createConsoleSession, deleteConsoleSession } from '../../lib/aggregator/console/sessions.ts';
import { csv, createUpload } from '../helpers/bulk-upload.ts';
import { startTestPlatform, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';
import { until } from '../helpers/until.ts';

const LIFETIME_S = 4;
let platform: TestPlatform;

beforeAll(async () => {
  platform = await startTestPlatform({
    services: ['aggregator'],
    env: { EVENT_STREAMS_PER_CALLER: '2', EVENT_STREAMS_MAX: '3', EVENT_STREAM_MAX_SECONDS: String(LIFETIME_S) },
  });
}, 60_000);
afterAll(() => platform?.stop());

interface OpenStream {
  status: number;
  headers: Headers;
  /** Everything the stream sent, once it ended (or was aborted). */
  text: Promise<string>;
  abort(): void;
}

/** Opens `path` with `headers` as an EventSource would; the body is read to its end in the background. */
async function open(path: string, headers: Record<string, string>): Promise<OpenStream> {
  const controller = new AbortController();
  const res = await fetch(`${platform.url('aggregator')}${path}`, { headers: { accept: 'text/event-stream', ...headers }, signal: controller.signal });
  const text = (async () => {
    let body = '';
    const decoder = new TextDecoder();
    try {
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) body += decoder.decode(chunk, { stream: true });
    } catch (err) {
      if ((err as Error).name !== 'AbortError') throw err;
    }
    return body;
  })();
  return { status: res.status, headers: res.headers, text, abort: () => controller.abort() };
}

/** A pending upload of `agg` (its stream never ends by itself) and its stream path. */
async function pendingJob(agg: TestAggregator): Promise<string> {
  const created = await createUpload(platform, agg.token, { participantType: 'seeker', file: csv(['name', 'phone'], [['Asha', '9812345670']]) });
  expect(created.status).toBe(201);
  return created.body.upload_id as string;
}

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
const apiStream = async (agg: TestAggregator, token = agg.token) => open(`/v1/bulk-uploads/${await pendingJob(agg)}/events`, bearer(token));
/** Opens a stream, retrying while streams ended by earlier tests are still counted (they are released within one read interval). */
const admitted = (agg: TestAggregator) => until('a stream admitted', async () => {
  const s = await apiStream(agg);
  if (s.status === 200) return s;
  s.abort();
  return null;
}, 10_000);

describe('event streams are bounded', () => {
  it('refuses a stream beyond EVENT_STREAMS_PER_CALLER per aggregator: 429 with Retry-After', async () => {
    const agg = await platform.aggregator({ types: ['seeker'] });
    const streams = [await admitted(agg), await admitted(agg)];
    const refused = await apiStream(agg);
    expect(refused.status).toBe(429);
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(JSON.parse(await refused.text).error).toMatchObject({ code: 'too_many_streams', detail: expect.stringContaining('EVENT_STREAMS_PER_CALLER') });
    for (const s of streams) s.abort();
    // A slot frees once a stream ends.
    (await admitted(agg)).abort();
  });

  it('refuses a stream beyond EVENT_STREAMS_MAX per process, whoever asks', async () => {
    const aggs = await Promise.all(Array.from({ length: 4 }, () => platform.aggregator({ types: ['seeker'] })));
    const streams = [await admitted(aggs[0]), await admitted(aggs[1]), await admitted(aggs[2])];
    const refused = await apiStream(aggs[3]);
    expect(refused.status).toBe(429);
    expect(JSON.parse(await refused.text).error).toMatchObject({ code: 'too_many_streams', detail: expect.stringContaining('EVENT_STREAMS_MAX') });
    for (const s of streams) s.abort();
  });

  it('ends a stream after EVENT_STREAM_MAX_SECONDS with a reconnect event', async () => {
    const agg = await platform.aggregator({ types: ['seeker'] });
    const started = Date.now();
    const stream = await admitted(agg);
    const body = await stream.text;
    expect(Date.now() - started).toBeGreaterThanOrEqual(LIFETIME_S * 1000 - 100);
    expect(body).toMatch(/^event: progress$/m);
    expect(body).toMatch(/retry: 1000\nid: \d+\nevent: reconnect\ndata: \{"reason":"max_lifetime"/);
    expect(body).not.toContain('event: done');
  });

  it('ends the stream of an aggregator suspended meanwhile with a denied event', async () => {
    const agg = await platform.aggregator({ types: ['seeker'] });
    const stream = await admitted(agg);
    await platform.ctx.pool.query(`UPDATE aggregator.aggregators SET status = 'suspended' WHERE aggregator_id = $1`, [agg.aggregatorId]);
    const body = await stream.text;
    expect(body).toMatch(/event: denied\ndata: \{"reason":"Aggregator is suspended/);
    expect(body).not.toContain('event: reconnect');
  });

  it('ends the stream once its bearer token expires', async () => {
    const agg = await platform.aggregator({ types: ['seeker'] });
    const uploadId = await pendingJob(agg);
    const shortLived = await platform.ctx.tokens.issue({
      sub: 'short', aggregator_id: agg.aggregatorId, org_id: agg.orgId, aggregator_type: ['seeker'], roles: ['operator'],
    }, 2);
    const stream = await open(`/v1/bulk-uploads/${uploadId}/events`, bearer(shortLived));
    expect(stream.status).toBe(200);
    const body = await stream.text;
    expect(body).toMatch(/event: denied\ndata: \{"reason":"the bearer token is no longer valid/);
    expect(body).not.toContain('event: reconnect');
  });

  it('ends a console stream once its session is signed out', async () => {
    const agg = await platform.aggregator({ types: ['seeker'] });
    const uploadId = await pendingJob(agg);
    const session = await createConsoleSession(platform.ctx.pool, {
      sub: 'console:viewer', aggregator_id: agg.aggregatorId, org_id: agg.orgId, aggregator_type: ['seeker'], roles: ['viewer'],
    }, 600);
    const stream = await open(`/console/uploads/${uploadId}/events`, { cookie: `ldp_console=${session}` });
    expect(stream.status).toBe(200);
    await deleteConsoleSession(platform.ctx.pool, session);
    const body = await stream.text;
    expect(body).toMatch(/event: denied\ndata: \{"reason":"the session has ended"\}/);
  });
});
