/**
 * search-reconcile in short runs (SEARCH_RECONCILE_RUN_MS=0: one step per run, pages of 2): a
 * change feed longer than one run is read to its end by follow-up jobs that continue where the
 * previous run stopped, and the saved cursor does not pass changes younger than SETTLE_MS.
 */
import { randomUUID } from 'node:crypto';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';
import { until } from '../helpers/until.ts';

let platform: TestPlatform;
let signalsKey: string;

beforeAll(async () => {
  platform = await startTestPlatform({
    services: ['signals', 'search'], worker: true,
    env: { EMBEDDING_PROVIDER: 'hashing', SEARCH_RECONCILE_RUN_MS: '0', SEARCH_RECONCILE_BATCH_SIZE: '2' },
  });
  signalsKey = await platform.apiKey('signals');
});
afterAll(() => platform.stop());

const indexed = async (ids: string[]) => (await platform.ctx.pool.query<{ n: number }>(
  'SELECT count(*)::int AS n FROM search.items WHERE item_id = ANY($1::uuid[])', [ids])).rows[0].n;
const reconcileJobs = async () => (await platform.ctx.pool.query<{ n: number }>(
  `SELECT count(*)::int AS n FROM graphile_worker.jobs WHERE task_identifier = 'search-reconcile'`)).rows[0].n;

describe('search-reconcile in short runs', () => {
  it('continues where a run stopped until the feed is read to its end, without moving the cursor past recent changes', async () => {
    const ids: string[] = [];
    for (const name of ['Primary School Karora', 'Veterinary Hospital Pundri', 'Gram Panchayat Office Kaul', 'Post Office Siwan',
      'Primary Health Centre Rajound', 'Anganwadi Centre Dhand', 'Rice Mill Cheeka']) {
      const item = {
        item_network: 'local-discovery', item_domain: 'provider', item_type: 'facility', item_id: randomUUID(),
        item_state: { name, category: 'Education', district: 'Kaithal', state: 'Haryana', latitude: 29.8, longitude: 76.4 },
        item_locations: [{ lat: 29.8, lng: 76.4 }],
      };
      const res = await request(platform.url('signals')).put(`/api/v1/items/${item.item_id}`).set('x-api-key', signalsKey).send(item);
      expect(res.status, JSON.stringify(res.body)).toBe(201);
      ids.push(item.item_id);
    }
    await until('the seven items indexed', async () => (await indexed(ids)) === 7, 20_000);
    // Every entry lost: only the change feed can bring them back, two a run.
    await platform.ctx.pool.query('DELETE FROM search.items WHERE item_id = ANY($1::uuid[])', [ids]);
    await until('no reconcile job queued', async () => (await reconcileJobs()) === 0, 20_000);

    await platform.worker!.runner.addJob('search-reconcile', {});
    await until('every entry repaired and no reconcile job left', async () => (await indexed(ids)) === 7 && (await reconcileJobs()) === 0, 20_000);
    // The changes are seconds old: a later run must read them again.
    const { rows } = await platform.ctx.pool.query(`SELECT value FROM search.settings WHERE key = 'reconcile_cursor'`);
    expect(rows).toEqual([]);
  });
});
