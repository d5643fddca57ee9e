import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import os from 'node:os';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listItemsChangedSince } from '../../lib/network/items.ts';
import type { Queryable } from '../../lib/platform/db.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';
import { ITEM_BATCH_SESSIONS } from '../../api/signals/item-batch.ts';

let platform: TestPlatform;
let key: string;

const facility = (over: Record<string, unknown> = {}) => ({
  item_network: 'local-discovery', item_domain: 'provider', item_type: 'facility', item_id: randomUUID(),
  item_state: { name: 'Govt High School Karora', category: 'Education', district: 'Kaithal', state: 'Haryana', latitude: 29.65, longitude: 76.54 },
  item_locations: [{ lat: 29.65, lng: 76.54 }],
  ...over,
});

async function indexJobs(): Promise<{ items: { item_id: string; lifecycle_status: string }[] }[]> {
  const { rows } = await platform.ctx.pool.query(
    `SELECT j.payload FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks t ON t.id = j.task_id
      WHERE t.identifier = 'search-index-items' ORDER BY j.id`);
  return rows.map((r) => r.payload);
}

beforeAll(async () => {
  platform = await startTestPlatform({ services: ['signals'] });
  key = await platform.apiKey('signals');
});
afterAll(() => platform.stop());

describe('signals items', () => {
  it('creates an item live when the go-live rules are met, and enqueues its indexing in the same transaction', async () => {
    const item = facility();
    const res = await request(platform.url('signals')).put(`/api/v1/items/${item.item_id}`).set('x-api-key', key).send(item);
    expect(res.status).toBe(201);
    expect(res.body).toMatchObject({ outcome: 'created', lifecycle_status: 'live', item: { item_id: item.item_id, item_state: item.item_state } });
    const jobs = await indexJobs();
    expect(jobs.at(-1)!.items.map((i) => i.item_id)).toEqual([item.item_id]);

    const again = await request(platform.url('signals')).put(`/api/v1/items/${item.item_id}`).set('x-api-key', key).send(item);
    expect(again.status).toBe(200);
    expect(again.body.outcome).toBe('unchanged');
    expect(await indexJobs()).toHaveLength(jobs.length);
  });

  it('upserts a batch with one result per item and rejects private fields, wrong types and conflicts per item', async () => {
    const a = facility();
    const b = facility({ item_state: { name: 'PHC', category: 'Medical', district: 'Kaithal', state: 'Haryana', latitude: 29.6, longitude: 76.5, phone: '+919876543210' } });
    const c = facility({ item_type: 'seeker_profile' });
    const d = { ...facility(), item_domain: 'seeker', item_type: 'seeker_profile', item_id: a.item_id };
    const res = await request(platform.url('signals')).post('/api/v1/items/batch').set('x-api-key', key).send({ items: [a, b, c, { nope: 1 }] });
    expect(res.status).toBe(200);
    expect(res.body.summary).toEqual({ total: 4, created: 1, updated: 0, unchanged: 0, conflict: 0, invalid: 3 });
    expect(res.body.results[1].message).toMatch(/additional properties/);
    expect(res.body.results[2].message).toMatch(/item_type of provider items must be facility/);

    const conflict = await request(platform.url('signals')).post('/api/v1/items/batch').set('x-api-key', key)
      .send({ items: [{ ...d, item_state: { skills: ['welding'], district: 'Kaithal', state: 'Haryana' } }] });
    expect(conflict.body.results[0]).toMatchObject({ outcome: 'conflict' });
  });

  it('takes an upper-case item_id as the same item (RFC 9562: UUIDs compare case-insensitively), in batches and one at a time', async () => {
    const item = facility();
    const upper = { ...item, item_id: item.item_id.toUpperCase() };
    const first = await request(platform.url('signals')).post('/api/v1/items/batch').set('x-api-key', key).send({ items: [upper] });
    expect(first.status).toBe(200);
    expect(first.body.results[0]).toMatchObject({ item_id: item.item_id, outcome: 'created' });
    const again = await request(platform.url('signals')).post('/api/v1/items/batch').set('x-api-key', key).send({ items: [item, upper] });
    expect(again.status).toBe(200);
    expect(again.body.results[0]).toMatchObject({ item_id: item.item_id, outcome: 'unchanged' });
    expect(again.body.results[1]).toMatchObject({ outcome: 'invalid' });
    expect(again.body.results[1].message).toMatch(/item_id repeated in this batch/);
    const one = await request(platform.url('signals')).put(`/api/v1/items/${upper.item_id}`).set('x-api-key', key).send(upper);
    expect(one.status).toBe(200);
    expect(one.body).toMatchObject({ outcome: 'unchanged', item: { item_id: item.item_id } });
  });

  it('enqueues one indexing job per batch whose snapshots are the created and updated items exactly as stored', async () => {
    const kept = facility();
    const changed = facility();
    await request(platform.url('signals')).post('/api/v1/items/batch').set('x-api-key', key).send({ items: [kept, changed] }).expect(200);
    const jobsBefore = (await indexJobs()).length;
    const created = facility({ item_state: { ...facility().item_state, name: 'Govt Primary School Karora' } });
    const updated = { ...changed, item_state: { ...changed.item_state, name: 'Govt Senior Secondary School Karora' } };
    const res = await request(platform.url('signals')).post('/api/v1/items/batch').set('x-api-key', key)
      .send({ items: [kept, created, updated] });
    expect(res.body.results.map((r: { outcome: string }) => r.outcome)).toEqual(['unchanged', 'created', 'updated']);

    const jobs = await indexJobs();
    expect(jobs).toHaveLength(jobsBefore + 1);
    const snapshots = jobs.at(-1)!.items;
    const stored = await Promise.all([created.item_id, updated.item_id].map(async (id) =>
      (await request(platform.url('signals')).get(`/api/v1/items/${id}`).set('x-api-key', key).expect(200)).body));
    expect(snapshots).toEqual(stored);
    expect(stored[0]).toMatchObject({ lifecycle_status: 'live', item_state: created.item_state });
  });

  it('keeps an item draft until the go-live rules are met, and moves lifecycle explicitly', async () => {
    const item = facility({ item_state: { name: 'Bus stand', category: 'Transport/Admin', district: 'Kaithal', state: 'Haryana' }, item_locations: [] });
    const created = await request(platform.url('signals')).put(`/api/v1/items/${item.item_id}`).set('x-api-key', key).send(item);
    expect(created.body.lifecycle_status).toBe('draft');
    const live = await request(platform.url('signals')).post(`/api/v1/items/${item.item_id}/lifecycle`).set('x-api-key', key).send({ lifecycle_status: 'live' });
    expect(live.status).toBe(409);
    const retired = await request(platform.url('signals')).post(`/api/v1/items/${item.item_id}/lifecycle`).set('x-api-key', key).send({ lifecycle_status: 'retired' });
    expect(retired.status).toBe(200);
    expect(retired.body.lifecycle_status).toBe('retired');
    expect((await indexJobs()).at(-1)!.items[0]).toMatchObject({ item_id: item.item_id, lifecycle_status: 'retired' });
    const back = await request(platform.url('signals')).post(`/api/v1/items/${item.item_id}/lifecycle`).set('x-api-key', key).send({ lifecycle_status: 'draft' });
    expect(back.status).toBe(409);
  });

  it('pages through changed items with a cursor, and answers 404 for an unknown item', async () => {
    const first = await request(platform.url('signals')).get('/api/v1/items?limit=1').set('x-api-key', key);
    expect(first.body.items).toHaveLength(1);
    const second = await request(platform.url('signals')).get(`/api/v1/items?limit=1&after=${encodeURIComponent(first.body.next_cursor)}`).set('x-api-key', key);
    expect(second.body.items[0].item_id).not.toBe(first.body.items[0].item_id);
    const missing = await request(platform.url('signals')).get(`/api/v1/items/${randomUUID()}`).set('x-api-key', key);
    expect(missing.status).toBe(404);
    expect(missing.body).toEqual({ error: 'not_found', message: expect.stringMatching(/^No item/) });
  });

  it('reads a page of the change feed in the order of items_updated_idx, without sorting every item', async () => {
    // The feed's own statement, caught on its way to the database, then explained with its values.
    const seen: { text: string; values: unknown[] }[] = [];
    const spy = { query: (text: string, values: unknown[]) => (seen.push({ text, values }), platform.ctx.pool.query(text, values)) };
    for (const after of [null, { updatedAt: '2026-01-01T00:00:00.000000Z', itemId: randomUUID() }]) {
      seen.length = 0;
      await listItemsChangedSince(spy as unknown as Queryable, after, 10);
      const client = await platform.ctx.pool.connect();
      try {
        await client.query('BEGIN');
        await client.query('SET LOCAL enable_seqscan = off'); // a small table would be read whole anyway
        await client.query('SET LOCAL plan_cache_mode = force_generic_plan');
        const { rows } = await client.query(`EXPLAIN ${seen[0].text}`, seen[0].values);
        const plan = rows.map((r) => r['QUERY PLAN']).join('\n');
        expect(plan).toContain('items_updated_idx');
        expect(plan).not.toMatch(/Sort|Filter/);
      } finally {
        await client.query('ROLLBACK');
        client.release();
      }
    }
  });

  it('writes a batch the platform\'s jobs push (its internal key) in the item batch thread\'s background sessions, any other in a request\'s', async () => {
    const threadSessions = async () => (await platform.ctx.pool.query(
      'SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1', [ITEM_BATCH_SESSIONS])).rows as { pid: number }[];
    const byKey = await request(platform.url('signals')).post('/api/v1/items/batch').set('x-api-key', key).send({ items: [facility()] });
    expect(byKey.body.summary.created).toBe(1);
    expect(await threadSessions()).toEqual([]);
    const byJobs = await request(platform.url('signals')).post('/api/v1/items/batch').set('x-api-key', platform.ctx.internalApiKey).send({ items: [facility()] });
    expect(byJobs.status).toBe(200);
    expect(byJobs.body.summary.created).toBe(1);
    const sessions = await threadSessions();
    expect(sessions.length).toBeGreaterThan(0);
    // Those sessions yield the CPU: BACKGROUND_NICE (proc(5) /proc/PID/stat, the 19th field).
    for (const { pid } of sessions) {
      const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
      expect(Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16])).toBe(Math.max(platform.config.BACKGROUND_NICE, os.getPriority()));
    }
    // The thread answers as the event loop does: an invalid item named, the others written; a body that is not a batch refused.
    const mixed = await request(platform.url('signals')).post('/api/v1/items/batch').set('x-api-key', platform.ctx.internalApiKey)
      .send({ items: [facility(), { item_id: 'not-a-uuid' }] });
    expect(mixed.body.summary).toMatchObject({ total: 2, created: 1, invalid: 1 });
    expect(mixed.body.results[1]).toMatchObject({ index: 1, outcome: 'invalid', message: expect.stringContaining('item_id') });
    const notJson = await request(platform.url('signals')).post('/api/v1/items/batch').set('x-api-key', platform.ctx.internalApiKey)
      .set('content-type', 'application/json').send('{"items": [');
    expect(notJson.status).toBe(400);
    expect(notJson.body).toEqual({ error: 'invalid_json', message: 'Request body is not valid JSON' });
    const empty = await request(platform.url('signals')).post('/api/v1/items/batch').set('x-api-key', platform.ctx.internalApiKey).send({ items: [] });
    expect(empty.status).toBe(400);
    expect(JSON.stringify(empty.body)).toContain('items');
  });
});
