/**
 * Indexing for search through the real tasks: items stored at signals are indexed by the
 * search-index-items job (graphile-worker, hashing embeddings); search-reconcile repairs missed
 * changes and re-embeds entries of another model version.
 */
import { randomUUID } from 'node:crypto';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HASHING_DIMENSIONS } from '../../lib/search/embeddings/index.ts';
import { ANALYZE_AFTER_ROWS, indexSnapshots, refreshStatistics } from '../../lib/search/indexer.ts';
import { searchEngine } from '../../lib/search/engine.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';
import { until } from '../helpers/until.ts';

let platform: TestPlatform;
let signalsKey: string;
let searchKey: string;

interface IndexRow {
  item_id: string;
  lifecycle_status: string;
  item_state: Record<string, unknown>;
  /** The stored words (sql/017_search_words.sql), sorted. */
  search_words: string[];
  content_hash: string;
  model_id: string;
  model_quantization: string;
  model_dimensions: number;
  embedding: number[];
  source_updated_at: string;
  indexed_at: string;
  embedded_at: string;
}

interface Facility {
  item_network: string;
  item_domain: string;
  item_type: string;
  item_id: string;
  item_state: Record<string, unknown>;
  item_locations: { lat: number; lng: number }[];
}

const facility = (state: Record<string, unknown> = {}, locations = [{ lat: 29.6574, lng: 76.5421 }]): Facility => ({
  item_network: 'local-discovery', item_domain: 'provider', item_type: 'facility', item_id: randomUUID(),
  item_state: { name: 'Veterinary Hospital Karora', category: 'Medical', district: 'Kaithal', state: 'Haryana', latitude: 29.6574, longitude: 76.5421, ...state },
  item_locations: locations,
});

async function indexRow(id: string): Promise<IndexRow | undefined> {
  const { rows } = await platform.ctx.pool.query<IndexRow>(
    `SELECT item_id, lifecycle_status, item_state, ARRAY(SELECT w FROM unnest(tsvector_to_array(search_words)) AS w ORDER BY w COLLATE "C") AS search_words, content_hash, model_id, model_quantization, model_dimensions, search.embedding_array(embedding) AS embedding,
            to_char(source_updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS source_updated_at,
            indexed_at::text, embedded_at::text
       FROM search.items WHERE item_id = $1`, [id]);
  return rows[0];
}

/** The index row once it reflects the item's `updated_at` at signals. */
const indexedAt = (id: string, updatedAt: string) =>
  until(`index of ${id} at ${updatedAt}`, async () => { const row = await indexRow(id); return row?.source_updated_at === updatedAt && row; }, 20_000);

async function put(item: Facility) {
  const res = await request(platform.url('signals')).put(`/api/v1/items/${item.item_id}`).set('x-api-key', signalsKey).send(item);
  expect(res.status, JSON.stringify(res.body)).toBeLessThan(300);
  return res.body.item as { updated_at: string; lifecycle_status: string };
}

async function lifecycle(id: string, status: string) {
  const res = await request(platform.url('signals')).post(`/api/v1/items/${id}/lifecycle`).set('x-api-key', signalsKey).send({ lifecycle_status: status });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body as { updated_at: string };
}

/** Adds a job and waits until the worker has completed it. @throws its last error if it failed. */
async function runJob(task: string, payload: unknown) {
  const job = await platform.worker!.runner.addJob(task, payload as never);
  await until(`job ${task}`, async () => {
    const { rows } = await platform.ctx.pool.query('SELECT last_error FROM graphile_worker._private_jobs WHERE id = $1', [job.id]);
    if (rows[0]?.last_error) throw new Error(`${task} failed: ${rows[0].last_error}`);
    return rows.length === 0;
  }, 20_000);
}

const search = (intent: Record<string, unknown>) => request(platform.url('search')).post('/v1/search').set('x-api-key', searchKey).send({
  context: { messageId: randomUUID(), networkId: 'local-discovery', domain: 'provider', itemType: 'facility' },
  message: { intent },
});
const found = async (intent: Record<string, unknown>) => (await search(intent)).body.message.items.map((i: { item_id: string }) => i.item_id);

beforeAll(async () => {
  platform = await startTestPlatform({ services: ['signals', 'search'], worker: true, env: { EMBEDDING_PROVIDER: 'hashing' } });
  signalsKey = await platform.apiKey('signals');
  searchKey = await platform.apiKey('search');
});
afterAll(() => platform.stop());

describe('search-index-items', () => {
  it('indexes an item stored at signals: record, locations, searchable text, unit embedding and model version', async () => {
    const item = facility({ services: ['vaccination'] }, [{ lat: 29.6574, lng: 76.5421 }, { lat: 29.8015, lng: 76.3998 }]);
    const stored = await put(item);
    const row = await indexedAt(item.item_id, stored.updated_at);
    expect(row).toMatchObject({
      lifecycle_status: 'live', item_state: item.item_state,
      // The words of 'Name: Veterinary Hospital Karora\nCategory: Medical\nServices offered: vaccination\nDistrict: Kaithal\nState: Haryana'.
      search_words: ['category', 'district', 'haryana', 'hospital', 'kaithal', 'karora', 'medical', 'name', 'offered', 'services', 'state', 'vaccination', 'veterinary'],
      model_id: 'ldp-hashing-ngram-v1', model_quantization: 'none', model_dimensions: HASHING_DIMENSIONS,
    });
    expect(row.embedding).toHaveLength(HASHING_DIMENSIONS);
    // Unit length, to half precision (stored as binary16: sql/015_search_f16.sql).
    expect(Math.hypot(...row.embedding)).toBeCloseTo(1, 3);
    const { rows: locations } = await platform.ctx.pool.query('SELECT position, lat, lng FROM search.item_locations WHERE item_id = $1 ORDER BY position', [item.item_id]);
    expect(locations).toEqual([{ position: 0, lat: 29.6574, lng: 76.5421 }, { position: 1, lat: 29.8015, lng: 76.3998 }]);
  });

  it('does not re-embed unchanged text: a change outside it updates the row only; a text change re-embeds', async () => {
    const item = facility();
    const first = await indexedAt(item.item_id, (await put(item)).updated_at);

    const capacity = await put({ ...item, item_state: { ...item.item_state, capacity: 40 } });
    const second = await indexedAt(item.item_id, capacity.updated_at);
    expect(second.item_state.capacity).toBe(40);
    expect(second.indexed_at > first.indexed_at).toBe(true);
    expect(second.embedded_at).toBe(first.embedded_at);
    expect(second.content_hash).toBe(first.content_hash);

    const renamed = await put({ ...item, item_state: { ...item.item_state, capacity: 40, name: 'Veterinary Polyclinic Karora' } });
    const third = await indexedAt(item.item_id, renamed.updated_at);
    expect(third.embedded_at > second.embedded_at).toBe(true);
    expect(third.content_hash).not.toBe(second.content_hash);
    expect(third.embedding).not.toEqual(second.embedding);
  });

  it('re-indexes lifecycle changes without re-embedding: draft and paused are kept but never found, live is found', async () => {
    const { latitude: _lat, longitude: _lng, ...noCoordinates } = facility().item_state;
    const item = { ...facility(), item_state: { ...noCoordinates, name: 'Veterinary Dispensary Pundri' }, item_locations: [] };
    const draft = await put(item);
    expect(draft.lifecycle_status).toBe('draft');
    const asDraft = await indexedAt(item.item_id, draft.updated_at);
    expect(asDraft.lifecycle_status).toBe('draft');
    expect(await found({ textSearch: 'Veterinary Dispensary Pundri' })).not.toContain(item.item_id);

    const live = await put({ ...item, item_state: { ...item.item_state, latitude: 29.7608, longitude: 76.5619 }, item_locations: [{ lat: 29.7608, lng: 76.5619 }] });
    expect(live.lifecycle_status).toBe('live');
    const asLive = await indexedAt(item.item_id, live.updated_at);
    expect(asLive.lifecycle_status).toBe('live');
    expect(asLive.embedded_at).toBe(asDraft.embedded_at);
    expect(await found({ textSearch: 'Veterinary Dispensary Pundri' })).toContain(item.item_id);

    const paused = await lifecycle(item.item_id, 'paused');
    expect((await indexedAt(item.item_id, paused.updated_at)).lifecycle_status).toBe('paused');
    expect(await found({ textSearch: 'Veterinary Dispensary Pundri' })).not.toContain(item.item_id);
    const back = await lifecycle(item.item_id, 'live');
    expect((await indexedAt(item.item_id, back.updated_at)).lifecycle_status).toBe('live');
    expect(await found({ textSearch: 'Veterinary Dispensary Pundri' })).toContain(item.item_id);
  });

  it('removes retired items, and a late older snapshot does not bring them back', async () => {
    const item = facility({ name: 'Old Veterinary Hospital' });
    const created = await put(item);
    await indexedAt(item.item_id, created.updated_at);
    await lifecycle(item.item_id, 'retired');
    await until('retired item to leave the index', async () => !(await indexRow(item.item_id)), 20_000);
    const { rows } = await platform.ctx.pool.query('SELECT 1 FROM search.retired_items WHERE item_id = $1', [item.item_id]);
    expect(rows).toHaveLength(1);

    const { rows: [snapshot] } = await platform.ctx.pool.query(
      `SELECT item_network, item_domain, item_type, item_id, item_state, item_locations, item_instance_url, item_schema_url, created_by,
              'live' AS lifecycle_status, $2::text AS created_at, $2::text AS updated_at
         FROM signals.items WHERE item_id = $1`, [item.item_id, created.updated_at]);
    await runJob('search-index-items', { items: [snapshot] });
    expect(await indexRow(item.item_id)).toBeUndefined();
  });

  it('ignores a snapshot older than the indexed one (jobs may run out of order)', async () => {
    const item = facility({ name: 'Veterinary Hospital Rajound' });
    const created = await put(item);
    const updated = await put({ ...item, item_state: { ...item.item_state, name: 'Veterinary Hospital Rajound New' } });
    const row = await indexedAt(item.item_id, updated.updated_at);
    await runJob('search-index-items', {
      items: [{ ...item, item_instance_url: null, item_schema_url: null, created_by: null, lifecycle_status: 'live', created_at: created.updated_at, updated_at: created.updated_at }],
    });
    expect(await indexRow(item.item_id)).toEqual(row);
  });

  it('refreshes the planner\'s statistics of search.items once half its rows have changed since they were taken, not after a job that only changed rows', async () => {
    const { pool } = platform.ctx;
    const analyzedRows = async () => (await pool.query<{ n: number }>(`SELECT reltuples::int AS n FROM pg_class WHERE oid = 'search.items'::regclass`)).rows[0].n;
    await pool.query('ANALYZE search.items');
    const before = await analyzedRows();
    expect(await refreshStatistics(pool, 5)).toBe(false); // nothing changed since
    const items = Array.from({ length: Math.max(10, before) }, (_, i) => facility({ name: `Sub Health Centre ${i}` }));
    const res = await request(platform.url('signals')).post('/api/v1/items/batch').set('x-api-key', signalsKey).send({ items });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    await until('the batch to be indexed', async () => (await pool.query(
      `SELECT count(*)::int AS n FROM search.items WHERE item_id = ANY($1::uuid[])`, [items.map((i) => i.item_id)])).rows[0].n === items.length, 20_000);
    // Below the default floor the indexing itself left the statistics alone.
    expect(items.length).toBeLessThan(ANALYZE_AFTER_ROWS);
    expect(await analyzedRows()).toBe(before);
    // Changes reach pg_stat_user_tables when the writing connection flushes its counts: at most a
    // second after its last flush, else after 10 s idle (PGSTAT_IDLE_INTERVAL; the pool keeps idle
    // connections open). Then the table is analyzed once.
    await until('an analyze of the grown table', () => refreshStatistics(pool, 5), 25_000);
    expect(await analyzedRows()).toBe(before + items.length);
    expect(await refreshStatistics(pool, 5)).toBe(false);

    // An indexing job that only changes rows in place does not analyze (issue 30: an upload
    // updating every item re-analyzed the table), even past the share: three rounds of every new
    // row, each counted before the next, at a floor of 5 rows.
    const { provider } = await searchEngine(platform.ctx);
    const counts = async () => (await pool.query<{ analyzed: number; updated: number }>(
      `SELECT analyze_count::int AS analyzed, n_tup_upd::int AS updated FROM pg_stat_user_tables WHERE relid = 'search.items'::regclass`)).rows[0];
    const start = await counts();
    for (const round of [1, 2, 3]) {
      const at = new Date(Date.now() + round * 1000).toISOString();
      const outcome = await indexSnapshots({ ...platform.ctx, analyzeAfterRows: 5 }, provider, items.map((item) => ({
        ...item, item_state: { ...item.item_state, name: `${item.item_state.name} (${round})` },
        item_instance_url: null, item_schema_url: null, created_by: null, lifecycle_status: 'live' as const, created_at: at, updated_at: at,
      })));
      expect(outcome.written).toBe(items.length);
      await until(`round ${round} to be counted`, async () => (await counts()).updated >= start.updated + round * items.length, 25_000);
    }
    expect((await counts()).analyzed).toBe(start.analyzed);
    expect(await analyzedRows()).toBe(before + items.length);
  }, 120_000);

  it('fails a job whose payload is not a list of snapshots, naming the problem', async () => {
    await expect(runJob('search-index-items', { items: [{ item_id: 'nope' }] })).rejects.toThrow(/payload is invalid: items\.0\./);
  });
});

describe('search-reconcile', () => {
  it('repairs a missed change from the change feed: a lost entry and a change whose job was lost', async () => {
    const lost = facility({ name: 'Veterinary Hospital Kaithal' });
    const changed = facility({ name: 'Gram Panchayat Office Karora', category: 'Transport/Admin' });
    await indexedAt(lost.item_id, (await put(lost)).updated_at);
    await indexedAt(changed.item_id, (await put(changed)).updated_at);

    await platform.ctx.pool.query('DELETE FROM search.items WHERE item_id = $1', [lost.item_id]);
    // A change stored at signals whose indexing job never ran (written here without one).
    const { rows: [{ updated_at }] } = await platform.ctx.pool.query(
      `UPDATE signals.items SET item_state = item_state || '{"name": "Gram Panchayat Bhawan Karora"}', updated_at = now() WHERE item_id = $1
       RETURNING to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS updated_at`, [changed.item_id]);

    await runJob('search-reconcile', {});
    expect(await indexRow(lost.item_id)).toMatchObject({ lifecycle_status: 'live', search_words: expect.arrayContaining(['veterinary', 'hospital', 'kaithal']) });
    expect(await indexRow(changed.item_id)).toMatchObject({ source_updated_at: updated_at, search_words: expect.arrayContaining(['gram', 'panchayat', 'bhawan', 'karora']) });
    expect(await found({ textSearch: 'bhawan' })).toContain(changed.item_id);
  });

  it('re-embeds entries of another model version with the current one', async () => {
    const item = facility({ name: 'Veterinary Hospital Pundri' });
    const before = await indexedAt(item.item_id, (await put(item)).updated_at);
    await platform.ctx.pool.query(
      `UPDATE search.items SET model_id = 'an-older-model', embedding = search.embedding_of(array_fill(0.125::real, ARRAY[64])), model_dimensions = 64 WHERE item_id = $1`,
      [item.item_id]);

    await runJob('search-reconcile', {});
    const after = (await indexRow(item.item_id))!;
    expect(after).toMatchObject({ model_id: before.model_id, model_dimensions: HASHING_DIMENSIONS, content_hash: before.content_hash });
    expect(after.embedding).toEqual(before.embedding);
    expect(after.embedded_at > before.embedded_at).toBe(true);
    const { rows } = await platform.ctx.pool.query(`SELECT count(*)::int AS n FROM search.items WHERE model_id <> 'ldp-hashing-ngram-v1'`);
    expect(rows[0].n).toBe(0);
  });
});
