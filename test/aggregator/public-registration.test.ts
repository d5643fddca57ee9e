/**
 * Public registration through registration links, against the real services and worker: the form
 * description, each outcome (201 passed, 409 skipped, 400 per field, 404, 410, 429 with
 * Retry-After), encrypted storage, link metrics, the push to signals by the task and the
 * participant found by search; and a push that fails is kept and retried, not lost.
 */
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { enqueue } from '../../lib/platform/jobs.ts';
import { startTestPlatform, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';
import { until } from '../helpers/until.ts';

let platform: TestPlatform;
let agg: TestAggregator;
let other: TestAggregator;

function expectShapeC(body: any, title: string, code?: string) {
  expect(body).toEqual({ error: expect.objectContaining({ code: code ?? expect.any(String), title, detail: expect.any(String), requestId: expect.any(String), timestamp: expect.any(String) }) });
}

const api = () => request(platform.url('aggregator'));

async function liveLink(a: TestAggregator, body: Record<string, unknown> = {}) {
  const res = await api().post('/v1/links/create').set('authorization', `Bearer ${a.token}`).send({ domain: 'seeker', status: 'live', ...body });
  expect(res.status).toBe(201);
  return res.body as { link_id: string; slug: string; public_url: string };
}

const publicPath = (a: TestAggregator, slug: string) => `/public/v1/aggregators/${a.orgSlug}/registrations/${slug}`;
const register = (a: TestAggregator, slug: string, body: unknown) => api().post(publicPath(a, slug)).send(body as object);
const metrics = async (a: TestAggregator, linkId: string) =>
  (await api().get(`/v1/links/${linkId}`).set('authorization', `Bearer ${a.token}`)).body.metrics;

const PRIYA = {
  name: 'Priya Sharma', phone: '98765 43210', email: 'Priya.Sharma@Example.in', gender: 'Female', age: 24,
  skills: ['electrician', 'solar panel installation'], languages: ['Hindi', 'Punjabi'], district: 'Kaithal', state: 'Haryana',
  consent_terms: true, consent_privacy: true,
};

beforeAll(async () => {
  platform = await startTestPlatform({ worker: true, env: { EMBEDDING_PROVIDER: 'hashing' } });
  agg = await platform.aggregator({ types: ['seeker'], name: 'Karnal Skills Centre' });
  other = await platform.aggregator({ types: ['seeker'] });
});
afterAll(() => platform?.stop());

describe('GET /public/v1/aggregators/{orgSlug}/registrations/{slug}', () => {
  it('describes the form: link, mode, participant schema with labels and closed sets, consent texts', async () => {
    const link = await liveLink(agg);
    const res = await api().get(publicPath(agg, link.slug));
    expect(res.status).toBe(200);
    expect(res.body.link).toMatchObject({ org_slug: agg.orgSlug, org_name: 'Karnal Skills Centre', slug: link.slug, domain: 'seeker', registration_mode: 'account_and_profile', status: 'live' });
    expect(res.body.schema.$id).toBe('urn:ldp:local-discovery:seeker');
    expect(res.body.fields).toContainEqual(expect.objectContaining({ name: 'gender', label: 'Gender', enum: ['female', 'male', 'other', 'prefer_not_to_say'], required: false }));
    expect(res.body.fields).toContainEqual(expect.objectContaining({ name: 'phone', required: true, identity: 'phone' }));
    expect(res.body.consent).toEqual({ required: false, texts: { consent_terms: expect.any(String), consent_privacy: expect.any(String) } });
  });

  it('presents only identity fields on an account_only link', async () => {
    const link = await liveLink(agg, { registration_mode: 'account_only' });
    const res = await api().get(publicPath(agg, link.slug));
    expect(res.body.fields.map((f: any) => f.name)).toEqual(['name', 'phone', 'email']);
    expect(res.body.consent.required).toBe(true);
  });

  it('answers 404 for unknown, draft and retired links and 410 for an expired one', async () => {
    const draft = await liveLink(agg, { status: 'draft' });
    const retired = await liveLink(agg);
    await api().post(`/v1/links/${retired.link_id}/retire`).set('authorization', `Bearer ${agg.token}`).expect(200);
    for (const path of [publicPath(agg, 'no-such-link'), publicPath(agg, draft.slug), publicPath(agg, retired.slug), `/public/v1/aggregators/nobody/registrations/${draft.slug}`]) {
      const get = await api().get(path);
      expect(get.status).toBe(404);
      expectShapeC(get.body, 'Not Found', 'link_not_found');
      const post = await api().post(path).send(PRIYA);
      expect(post.status).toBe(404);
    }
    const expired = await liveLink(agg, { expires_at: new Date(Date.now() + 60_000).toISOString() });
    await platform.ctx.pool.query(`UPDATE aggregator.registration_links SET expires_at = now() - interval '1 minute' WHERE link_id = $1`, [expired.link_id]);
    const res = await register(agg, expired.slug, PRIYA);
    expect(res.status).toBe(410);
    expectShapeC(res.body, 'Gone', 'link_expired');
  });
});

describe('POST /public/v1/aggregators/{orgSlug}/registrations/{slug}', () => {
  it('registers a participant (201), stores identity encrypted, pushes it to signals and search finds it', async () => {
    const link = await liveLink(agg);
    const res = await register(agg, link.slug, PRIYA);
    expect(res.status).toBe(201);
    expect(res.body).toEqual({
      outcome: 'passed', submission_id: expect.stringMatching(/^[0-9a-f-]{36}$/), registration_mode: 'account_and_profile',
      submission_shape: 'account_and_profile', lifecycle_status: 'live', owned_elsewhere: false,
    });
    const id = res.body.submission_id;
    const { rows: [p] } = await platform.ctx.pool.query('SELECT * FROM aggregator.participants WHERE participant_id = $1', [id]);
    expect(p).toMatchObject({ aggregator_id: agg.aggregatorId, domain: 'seeker', registration_link_id: link.link_id });
    expect(p.phone_encrypted).not.toContain('9876543210');
    expect(platform.ctx.pii.decrypt(p.phone_encrypted)).toBe('+919876543210');
    expect(platform.ctx.pii.decrypt(p.email_encrypted)).toBe('priya.sharma@example.in');
    expect(p.profile).toMatchObject({ gender: 'female', age: 24, skills: ['electrician', 'solar panel installation'] });
    expect(p.profile.phone).toBeUndefined();
    expect(p.consent).toEqual({ consent_terms: { value: true, given_at: expect.any(String) }, consent_privacy: { value: true, given_at: expect.any(String) } });
    expect(await metrics(agg, link.link_id)).toEqual({ total: 1, passed: 1, failed: 0, skipped: 0 });

    const pushed = await until('the push', async () => (await platform.ctx.pool.query(
      'SELECT lifecycle_status, pushed_at FROM aggregator.participants WHERE participant_id = $1 AND pushed_at IS NOT NULL', [id])).rows[0]);
    expect(pushed.lifecycle_status).toBe('live');
    const { rows: [item] } = await platform.ctx.pool.query('SELECT item_state, item_type FROM signals.items WHERE item_id = $1', [id]);
    expect(item.item_type).toBe('seeker_profile');
    expect(item.item_state).not.toHaveProperty('phone');
    expect(item.item_state).not.toHaveProperty('name');

    const searchKey = await platform.apiKey('search');
    await until('indexing', async () => (await platform.ctx.pool.query('SELECT 1 FROM search.items WHERE item_id = $1', [id])).rows[0]);
    const found = await request(platform.url('search')).post('/v1/search').set('x-api-key', searchKey).send({
      context: { messageId: 'm1', networkId: 'local-discovery', domain: 'seeker', itemType: 'seeker_profile' },
      message: { intent: { textSearch: 'solar panel electrician' } },
    });
    expect(found.status).toBe(200);
    expect(found.body.message.items.map((i: { item_id: string }) => i.item_id)).toContain(id);
  });

  it('skips the same phone again with 409 and creates nothing; another aggregator sees it owned elsewhere', async () => {
    const link = await liveLink(agg);
    await register(agg, link.slug, { ...PRIYA, phone: '+91 99887 76655', email: 'ravi@example.in', name: 'Ravi' }).expect(201);
    const before = (await platform.ctx.pool.query('SELECT count(*)::int AS n FROM aggregator.participants')).rows[0].n;
    const again = await register(agg, link.slug, { ...PRIYA, phone: '9988776655', email: 'someone.else@example.in', name: 'Ravi K' });
    expect(again.status).toBe(409);
    expect(again.body).toEqual({
      outcome: 'skipped', message: expect.stringContaining('phone number is already registered'), registration_mode: 'account_and_profile',
      submission_shape: 'account_and_profile', lifecycle_status: expect.toBeOneOf(['live', null]), owned_elsewhere: false,
    });
    expect((await platform.ctx.pool.query('SELECT count(*)::int AS n FROM aggregator.participants')).rows[0].n).toBe(before);
    expect(await metrics(agg, link.link_id)).toEqual({ total: 2, passed: 1, failed: 0, skipped: 1 });

    const elsewhere = await liveLink(other);
    const res = await register(other, elsewhere.slug, { ...PRIYA, phone: '9988776655', email: 'x@example.in' });
    expect(res.status).toBe(201);
    expect(res.body.owned_elsewhere).toBe(true);
  });

  it('answers 400 in shape C naming each bad field, counts it failed and stores nothing', async () => {
    const link = await liveLink(agg);
    const res = await register(agg, link.slug, { name: 'A', phone: '12', gender: 'robot', age: 7, hobby: 'chess', state: 'Haryana', consent_terms: 'maybe' });
    expect(res.status).toBe(400);
    expectShapeC(res.body, 'Bad Request', 'invalid_registration');
    expect(Object.keys(res.body.error.fields).sort()).toEqual(['age', 'consent_terms', 'gender', 'hobby', 'phone']);
    expect(res.body.error.fields.gender[0]).toContain('must be one of');
    const none = await api().post(publicPath(agg, link.slug)).set('content-type', 'application/json').send('[1]');
    expect(none.status).toBe(400);
    expect(await metrics(agg, link.link_id)).toEqual({ total: 2, passed: 0, failed: 2, skipped: 0 });
    const { rows } = await platform.ctx.pool.query('SELECT 1 FROM aggregator.participants WHERE registration_link_id = $1', [link.link_id]);
    expect(rows).toHaveLength(0);
  });

  it('accepts only identity and consent on an account_only link, consent required', async () => {
    const link = await liveLink(agg, { registration_mode: 'account_only' });
    const noConsent = await register(agg, link.slug, { name: 'Asha', phone: '9812345678' });
    expect(noConsent.status).toBe(400);
    expect(Object.keys(noConsent.body.error.fields).sort()).toEqual(['consent_privacy', 'consent_terms']);
    const profile = await register(agg, link.slug, { name: 'Asha', phone: '9812345678', skills: ['tailoring'], consent_terms: true, consent_privacy: true });
    expect(profile.status).toBe(400);
    expect(Object.keys(profile.body.error.fields)).toEqual(['skills']);
    const ok = await register(agg, link.slug, { name: 'Asha', phone: '9812345678', consent_terms: true, consent_privacy: true });
    expect(ok.status).toBe(201);
    expect(ok.body).toMatchObject({ outcome: 'passed', registration_mode: 'account_only', submission_shape: 'account', lifecycle_status: 'draft' });
  });

  it('answers the 21st submission within the window with 429 and Retry-After', async () => {
    const link = await liveLink(agg);
    for (let i = 0; i < 20; i++) await register(agg, link.slug, {}).expect(400);
    const res = await register(agg, link.slug, PRIYA);
    expect(res.status).toBe(429);
    expectShapeC(res.body, 'Too Many Requests', 'rate_limited');
    expect(Number(res.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect(Number(res.headers['retry-after'])).toBeLessThanOrEqual(60);
    // The limit is per link: another link of the same organisation still accepts.
    const fresh = await liveLink(agg);
    await register(agg, fresh.slug, {}).expect(400);
  });
});

describe('closed links and the rate-limit store', () => {
  it('closes the links of a suspended aggregator (404)', async () => {
    const suspended = await platform.aggregator({ types: ['seeker'] });
    const link = await liveLink(suspended);
    await api().get(publicPath(suspended, link.slug)).expect(200);
    await platform.ctx.pool.query(`UPDATE aggregator.aggregators SET status = 'suspended' WHERE aggregator_id = $1`, [suspended.aggregatorId]);
    const res = await register(suspended, link.slug, PRIYA);
    expect(res.status).toBe(404);
    expectShapeC(res.body, 'Not Found', 'link_not_found');
    expect((await api().get(`/r/${suspended.orgSlug}/${link.slug}`)).status).toBe(404);
  });

  it('deletes expired rate-limit counters with the aggregator-clean-rate-limits task, keeping live ones', async () => {
    await platform.ctx.pool.query(
      `INSERT INTO aggregator.registration_rate_limits (key, points, expire) VALUES ('t:old', 3, $1), ('t:live', 3, $2)`,
      [Date.now() - 1000, Date.now() + 3_600_000]);
    await enqueue(platform.ctx.pool, { task: 'aggregator-clean-rate-limits', payload: {} });
    await until('the cleanup', async () => (await platform.ctx.pool.query(`SELECT 1 FROM aggregator.registration_rate_limits WHERE key = 't:old'`)).rows.length === 0);
    const { rows } = await platform.ctx.pool.query(`SELECT key FROM aggregator.registration_rate_limits WHERE key LIKE 't:%'`);
    expect(rows).toEqual([{ key: 't:live' }]);
  });
});

describe('a push that fails', () => {
  it('keeps the submission and leaves the job to be retried', async () => {
    const down = await startTestPlatform({ services: ['aggregator'], worker: true, env: { SIGNALS_URL: 'http://127.0.0.1:9' } });
    try {
      const a = await down.aggregator({ types: ['seeker'] });
      const { body: link } = await request(down.url('aggregator')).post('/v1/links/create').set('authorization', `Bearer ${a.token}`).send({ domain: 'seeker', status: 'live' });
      const res = await request(down.url('aggregator')).post(`/public/v1/aggregators/${a.orgSlug}/registrations/${link.slug}`).send(PRIYA);
      expect(res.status).toBe(201);
      // graphile-worker counts an attempt when it takes the job; the error is recorded once it fails.
      const job = await until('a failed attempt', async () => (await down.ctx.pool.query(
        `SELECT attempts, max_attempts, last_error FROM graphile_worker.jobs
          WHERE task_identifier = 'aggregator-push-participant' AND attempts > 0 AND last_error IS NOT NULL`)).rows[0]);
      expect(job.last_error).toContain('signals did not answer');
      expect(job.attempts).toBeLessThan(job.max_attempts);
      const { rows: [p] } = await down.ctx.pool.query('SELECT pushed_at FROM aggregator.participants WHERE participant_id = $1', [res.body.submission_id]);
      expect(p.pushed_at).toBeNull();
    } finally {
      await down.stop();
    }
  });
});
