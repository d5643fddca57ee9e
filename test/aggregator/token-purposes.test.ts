/**
 * One use per token (issue 29, finding 3; docs/decisions.md "One use per token; roles in the
 * console"): the console sign-in link `ldp console` prints is no bearer token anywhere, and still
 * signs in exactly once; every other credential the platform mints is refused where it is not
 * meant to be used (aggregator bearer token, person's user token, console link, review link).
 */
import { randomUUID } from 'node:crypto';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createReview, reviewLinkKey, signReviewToken } from '../../lib/aggregator/review-links.ts';
import { runLdp } from '../helpers/cli.ts';
import { ConsoleClient, consoleLinkFor } from '../helpers/console.ts';
import { startTestPlatform, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';

let platform: TestPlatform;
let agg: TestAggregator;
const aggregator = () => request(platform.url('aggregator'));

beforeAll(async () => {
  platform = await startTestPlatform({ services: ['signals', 'aggregator'] });
  agg = await platform.aggregator({ types: ['seeker'] });
}, 60_000);
afterAll(() => platform?.stop());

/** Signs in to the console with `token` as the sign-in form posts it. */
async function consoleSignIn(token: string) {
  const client = new ConsoleClient(platform.url('aggregator'));
  const page = await client.get(`/console/login?token=${encodeURIComponent(token)}`);
  const csrf = /name="_csrf" value="([^"]+)"/.exec(page.text)![1];
  return client.post('/console/login', { _csrf: csrf, token });
}

/** The aggregator's bearer routes of finding 3 (and /v1/me), with `token` as Bearer. */
const bearerCalls = (token: string): [string, () => request.Test][] => [
  ['GET /v1/dashboard', () => aggregator().get('/v1/dashboard').set('authorization', `Bearer ${token}`)],
  ['GET /v1/bulk-uploads', () => aggregator().get('/v1/bulk-uploads').set('authorization', `Bearer ${token}`)],
  ['POST /v1/dashboard/export/profiles', () => aggregator().post('/v1/dashboard/export/profiles').set('authorization', `Bearer ${token}`).send({ item_ids: [randomUUID()] })],
  ['GET /v1/me', () => aggregator().get('/v1/me').set('authorization', `Bearer ${token}`)],
];

describe('one use per token', () => {
  it('the link ldp console prints is refused as a bearer token everywhere, and signs in to the console once', async () => {
    const printed = await runLdp(['console', '--aggregator', agg.aggregatorId, '--role', 'operator', '--url', platform.url('aggregator')],
      { DATA_DIR: platform.dataDir, DATABASE_URL: platform.databaseUrl });
    expect(printed.stderr).toBe('');
    const token = new URL(printed.stdout.trim()).searchParams.get('token')!;

    const refusedEverywhere = async () => {
      for (const [name, call] of bearerCalls(token)) {
        const res = await call();
        expect(res.status, `${name}: ${JSON.stringify(res.body)}`).toBe(401);
        expect(res.body.error).toMatchObject({ code: 'invalid_token', detail: expect.stringContaining('not a bearer token') });
      }
      // Nor is it a person's or an aggregator's identity on the other routes that take a bearer token.
      const me = await request(platform.url('signals')).get('/api/v1/auth/me').set('authorization', `Bearer ${token}`);
      expect(me.status).toBe(401);
      for (const path of ['/v1/aggregator-registrations/create', '/v1/aggregator-registrations/token']) {
        expect((await aggregator().post(path).set('authorization', `Bearer ${token}`).send({})).status, path).toBe(401);
      }
    };
    await refusedEverywhere();
    const { rows } = await platform.ctx.pool.query('SELECT count(*)::int AS n FROM aggregator.profile_exports WHERE aggregator_id = $1', [agg.aggregatorId]);
    expect(rows[0].n).toBe(0);

    const first = await consoleSignIn(token);
    expect(first.status).toBe(303);
    expect(first.headers.location).toBe('/console/uploads');
    const again = await consoleSignIn(token);
    expect(again.status).toBe(401);
    expect(again.text).toContain('already been used');
    await refusedEverywhere();
  });

  it('refuses each credential where it is not meant to be used', async () => {
    const link = new URL(await consoleLinkFor(platform, agg, 'admin')).searchParams.get('token')!;
    const user = await platform.ctx.tokens.issueUser(randomUUID(), 600);
    const reviewId = await createReview(platform.ctx.pool, 'organisation', agg.orgId);
    const review = await signReviewToken(await reviewLinkKey(platform.config),
      { reviewId, kind: 'organisation', subjectId: agg.orgId, intent: 'approve' }, new Date(Date.now() + 600_000));

    // Aggregator bearer routes: the aggregator's token only.
    expect((await aggregator().get('/v1/me').set('authorization', `Bearer ${agg.token}`)).status).toBe(200);
    for (const [name, token] of Object.entries({ link, user, review })) {
      const res = await aggregator().get('/v1/me').set('authorization', `Bearer ${token}`);
      expect(res.status, name).toBe(401);
      expect(res.body.error.code, name).toBe('invalid_token');
    }
    // Console sign-in: a console link only (tried last: it is spent by the sign-in).
    for (const [name, token] of Object.entries({ aggregator: agg.token, user, review })) {
      const res = await consoleSignIn(token);
      expect(res.status, name).toBe(401);
      expect(res.text, name).toContain('invalid or has expired');
    }
    // Review pages: a review link only.
    for (const [name, token] of Object.entries({ aggregator: agg.token, user, link })) {
      const res = await aggregator().get(`/review/${token}`);
      expect(res.status, name).toBe(400);
      expect(res.text, name).toContain('Invalid review link');
    }
    expect((await aggregator().get(`/review/${review}`)).status).toBe(200);
    expect((await consoleSignIn(link)).status).toBe(303);
  });

  it('a person\'s token cannot be minted with a purpose, so no user token is a console link', async () => {
    await expect(platform.ctx.tokens.issueUser(randomUUID(), 60, { purpose: 'console-login' })).rejects.toThrow(/issueForPurpose/);
  });
});
