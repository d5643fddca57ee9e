/**
 * Malformed requests that once answered 500 (issue 15's findings): each now gets a 4xx in the
 * route's error shape, and `/ready` never reads as ready when one of its checks throws.
 */
import { randomUUID } from 'node:crypto';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';

let platform: TestPlatform;
let searchKey: string;
let signalsKey: string;

beforeAll(async () => {
  platform = await startTestPlatform();
  searchKey = await platform.apiKey('search');
  signalsKey = await platform.apiKey('signals');
});
afterAll(() => platform.stop());

const shapeA = { error: expect.any(String), message: expect.any(String) };
const context = { messageId: 'm-1', networkId: 'local-discovery', domain: 'seeker', itemType: 'seeker_profile' };

describe('POST /v1/search/flat with hostile keys', () => {
  const flat = (body: Record<string, unknown>) => request(platform.url('search')).post('/v1/search/flat').set('x-api-key', searchKey).send(body);

  it.each([
    ['toString.1'], ['constructor'], ['valueOf'], ['hasOwnProperty.0'], ['toString'], ['__proto__.x'], ['message.intent.constructor'],
  ])('answers 400 in shape A for the key %s', async (key) => {
    const res = await flat({ 'context.messageId': 'm-1', [key]: 'x' });
    expect(res.status).toBe(400);
    expect(res.body).toEqual(shapeA);
  });

  it('answers 400 for a key of 20,000 dotted segments, naming the limit', async () => {
    const res = await flat({ [Array.from({ length: 20_000 }, () => 'a').join('.')]: '1' });
    expect(res.status).toBe(400);
    expect(res.body.message).toMatch(/at most 10 dot-separated segments/);
  });
});

describe('POST /v1/search filters on list fields', () => {
  const search = (filter: Record<string, unknown>) => request(platform.url('search')).post('/v1/search').set('x-api-key', searchKey)
    .send({ context, message: { intent: { filters: [filter] } } });

  it.each(['eq', 'neq', 'contains'])('caps the value list of %s at 100', async (op) => {
    const values = Array.from({ length: 101 }, (_, i) => `skill-${i}`);
    const res = await search({ op, target: 'item_state.skills', value: values });
    expect(res.status).toBe(400);
    expect(res.body).toEqual(shapeA);
    expect(res.body.message).toMatch(/at most 100|1 to 100/);
    expect((await search({ op, target: 'item_state.skills', value: values.slice(0, 100) })).status).toBe(200);
  });
});

describe('GET /api/v1/items?after=', () => {
  it.each([
    'x,------------------------------------', '1,00000000-0000-4000-8000-000000000000', '2026-01-01T00:00:00.000000Z,not-a-uuid',
    '2026-01-01T00:00:00.000000Z,00000000-0000-4000-8000-000000000000,extra',
  ])('answers 400 in shape A for the cursor %s', async (after) => {
    const res = await request(platform.url('signals')).get('/api/v1/items').query({ after }).set('x-api-key', signalsKey);
    expect(res.status).toBe(400);
    expect(res.body).toEqual(shapeA);
  });

  it('accepts a cursor of the feed’s own form', async () => {
    const res = await request(platform.url('signals')).get('/api/v1/items')
      .query({ after: `2026-01-01T00:00:00.000000Z,${randomUUID()}` }).set('x-api-key', signalsKey);
    expect(res.status).toBe(200);
  });
});

// Found by the schema-driven fuzzer (test/platform/fuzz-schemas.test.ts).
describe('requests valid but for one thing, that answered 500', () => {
  const shapeC = { error: expect.objectContaining({ code: expect.any(String), detail: expect.any(String), requestId: expect.any(String) }) };

  it.each(['constructor', 'toString', 'hasOwnProperty', '__proto__'])('a public registration with a field named %s → 400 naming it', async (key) => {
    const agg = await platform.aggregator({ types: ['seeker'] });
    const link = await request(platform.url('aggregator')).post('/v1/links/create').set('authorization', `Bearer ${agg.token}`)
      .send({ domain: 'seeker', slug: `proto-${key.replace(/_/g, '')}`.toLowerCase(), status: 'live' });
    expect(link.status).toBe(201);
    const res = await request(platform.url('aggregator')).post(`/public/v1/aggregators/${agg.orgSlug}/registrations/${link.body.slug}`)
      .type('application/json').send(`{"name":"Asha Devi","${key}":[1]}`);
    expect(res.status).toBe(400);
    expect(res.body).toMatchObject(shapeC);
    expect(Object.hasOwn(res.body.error.fields, key)).toBe(true);
  });

  it('a NUL character in a query parameter, a path segment or a JSON body → 400 naming where', async () => {
    const agg = await platform.aggregator();
    const aggregator = (path: string) => request(platform.url('aggregator')).get(path).set('authorization', `Bearer ${agg.token}`);
    for (const path of ['/v1/bulk-uploads/mappings?participant_type=seeker%00', `/v1/links/${randomUUID().slice(0, 30)}%00`]) {
      const res = await aggregator(path);
      expect(res.status, path).toBe(400);
      expect(res.body, path).toMatchObject(shapeC);
      expect(res.body.error.detail, path).toMatch(/NUL character/);
    }
    const item = await request(platform.url('signals')).put(`/api/v1/items/${randomUUID()}`).set('x-api-key', signalsKey)
      .send({ item_network: 'local-discovery', item_domain: 'provider', item_type: 'facility', item_state: { name: 'Ward\u00003' } });
    expect(item.status).toBe(400);
    expect(item.body).toEqual(shapeA);
    expect(item.body.message).toMatch(/item_state\.name contains a NUL character/);
  });

  it('an integer past PostgreSQL’s int4 (a mapping version, a page) → 400', async () => {
    const agg = await platform.aggregator();
    for (const path of [`/v1/bulk-uploads/mappings/${randomUUID()}?version=4837417339021650`, '/v1/links?page=4837417339021650', '/v1/bulk-uploads?page=2147483648']) {
      const res = await request(platform.url('aggregator')).get(path).set('authorization', `Bearer ${agg.token}`);
      expect(res.status, path).toBe(400);
      expect(res.body, path).toMatchObject(shapeC);
    }
  });
});

describe('GET /ready when a check throws', () => {
  it('reports the check failed (503), never leaves it out', async () => {
    await platform.ctx.pool.query('ALTER TABLE platform.worker_heartbeats RENAME TO worker_heartbeats_away');
    try {
      const res = await request(platform.url('aggregator')).get('/ready');
      expect(res.status).toBe(503);
      expect(res.body.checks.database).toEqual({ ok: true });
      expect(res.body.checks.migrations).toMatchObject({ ok: true });
      expect(res.body.checks.worker).toEqual({ ok: false, error: expect.stringMatching(/worker_heartbeats/) });
    } finally {
      await platform.ctx.pool.query('ALTER TABLE platform.worker_heartbeats_away RENAME TO worker_heartbeats');
    }
  });
});
