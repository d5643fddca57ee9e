/**
 * A bulk upload, then search (runs on both paths, vitest.config.ts): 1,500 facilities of the
 * medium PMGSY file onboarded as providers through the aggregator's HTTP API and a real worker,
 * indexed by the search-index-items jobs; once the vector index has them (usearch: caught up;
 * pgvector: the graph built or the tail moved in, lib/search/pgvector-graph.ts), the search
 * service's answers over HTTP — through its vector index — are those of the exact path on the
 * same rows: texts, a text within a place, an anchor, filters.
 */
import { createReadStream } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { parse } from 'csv-parse';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { withTransaction } from '../../lib/platform/db.ts';
import { createSearchEngine, searchEngine } from '../../lib/search/engine.ts';
import { runSearch, type SearchEngine, type SearchItem } from '../../lib/search/query.ts';
import { searchBodySchema } from '../../lib/search/request.ts';
import { REPO_ROOT } from '../helpers/cli.ts';
import { csv, onboard } from '../helpers/bulk-upload.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';
import { sample } from '../helpers/metrics.ts';
import { absent, NEEDS_SHARED, titled } from '../helpers/requires.ts';
import { until } from '../helpers/until.ts';

const MEDIUM = path.resolve(REPO_ROOT, '../shared/data/pmgsy-schools-clinics-haryana-punjab/pmgsy_education_medical_haryana_punjab.csv');
const COLUMN_MAP = path.join(REPO_ROOT, 'fixtures/column-maps/pmgsy-facilities.json');
const ROWS = 1500;

/** The header and the first `count` records of a CSV file. */
async function firstRecords(file: string, count: number): Promise<string[][]> {
  const out: string[][] = [];
  for await (const record of createReadStream(file).pipe(parse({ relax_column_count: true })) as AsyncIterable<string[]>) {
    out.push(record);
    if (out.length > count) break;
  }
  return out;
}

/** Equal pages: the same scores position by position; items may differ only among equal scores. */
function samePage(label: string, a: SearchItem[], b: SearchItem[]) {
  expect(a.map((i) => i.score?.toFixed(5)), label).toEqual(b.map((i) => i.score?.toFixed(5)));
  if (a[0]?.score === undefined) {
    expect(a.map((i) => i.item_id), label).toEqual(b.map((i) => i.item_id));
    return;
  }
  const inB = new Set(b.map((i) => i.item_id));
  for (const item of a) if (!inB.has(item.item_id)) expect(Math.abs(item.score! - a.at(-1)!.score!), label).toBeLessThan(1e-5);
}

const noData = absent([MEDIUM], NEEDS_SHARED);
describe.skipIf(noData !== '')(titled(`search after a bulk upload (${inject('vectorBackend')})`, noData), () => {
  let platform: TestPlatform;
  let searchKey: string;
  /** The exact path on the same database: every count exact, every ranking by brute force. */
  let exact: SearchEngine;
  let header: string[];
  let rows: string[][];

  beforeAll(async () => {
    platform = await startTestPlatform({
      services: ['signals', 'aggregator', 'search'], worker: true,
      env: { EMBEDDING_PROVIDER: 'hashing', SEARCH_TEXT_SIMILARITY_THRESHOLD: '0.2', BULK_UPLOAD_CHUNK_ROWS: '500' },
    });
    searchKey = await platform.apiKey('search');
    [header, ...rows] = await firstRecords(MEDIUM, ROWS);
    const agg = await platform.aggregator({ types: ['provider'] });
    const columnMap = JSON.parse(await readFile(COLUMN_MAP, 'utf8'));
    const job = await onboard(platform, agg.token, { participantType: 'provider', file: csv(header, rows), filename: 'medium.csv', columnMap });
    expect(job).toMatchObject({ status: 'completed', passed: ROWS });
    await until('every item indexed', async () =>
      (await platform.ctx.pool.query('SELECT count(*)::int AS n FROM search.items')).rows[0].n === ROWS, 60_000);
    // The vector index holds every row: usearch caught up with the last write; pgvector's graph
    // built and every row in it (none left in the tail).
    await until('the vector index settled', async () => {
      const { checks } = (await request(platform.url('search')).get('/ready')).body;
      const status = checks.vector_backend;
      if (status.state !== 'ready') return false;
      const { rows: [db] } = await platform.ctx.pool.query<{ seq: number; graph: number; tail: number }>(
        `SELECT (SELECT max(change_seq)::int FROM search.items) AS seq, g.value::int AS graph,
                (SELECT count(*)::int FROM search.items WHERE ann_gen > g.value::int) AS tail
           FROM search.settings g WHERE g.key = 'ann_graph_gen'`);
      return status.backend === 'pgvector' ? db.graph > 0 && db.tail === 0 : status.cursor >= db.seq;
    }, 120_000);
    // And the search service's gauge of what its vector index has not taken in says so.
    const metrics = await request(platform.url('search')).get('/metrics');
    expect(sample(metrics.text, 'search_index_pending_changes', {})).toBe(0);
    expect(sample(metrics.text, 'search_index_items', { backend: inject('vectorBackend') })).toBe(ROWS);
    const { provider } = await searchEngine(platform.ctx);
    exact = createSearchEngine({
      network: platform.ctx.network, backend: inject('vectorBackend'), provider, exactMaxRows: 1e9, totalExactBound: 1e9,
      transaction: (fn) => withTransaction(platform.ctx.pool, fn),
    });
  }, 300_000);
  afterAll(() => platform?.stop());

  const intents = () => {
    const col = (name: string) => header.indexOf(name);
    const at = (r: string[]) => ({ type: 'Point', coordinates: [Number(r[col('longitude')]), Number(r[col('latitude')])] });
    return [
      ['text', { textSearch: 'govt sr secondary school' }],
      ['misspelt text', { textSearch: 'primery helth centre' }],
      ['one word', { textSearch: 'dispensary' }],
      ['text within a place', { textSearch: 'school', spatial: [{ op: 's_dwithin', geometry: at(rows[10]), distanceMeters: 30_000 }] }],
      ['filter, newest', { filters: [{ op: 'eq', target: 'item_state.category', value: 'Medical' }] }],
    ] as [string, Record<string, unknown>][];
  };
  const body = (intent: Record<string, unknown>) => ({
    context: { messageId: 'm', networkId: 'local-discovery', domain: 'provider', itemType: 'facility' }, message: { intent },
  });

  it('answers over HTTP, through the vector index, as the exact path does on the same rows', async () => {
    const { rows: [anchor] } = await platform.ctx.pool.query(`SELECT item_id::text FROM search.items ORDER BY created_at, item_id OFFSET 100 LIMIT 1`);
    for (const [label, intent] of [...intents(), ['anchor', { item: { id: anchor.item_id } }] as [string, Record<string, unknown>]]) {
      const res = await request(platform.url('search')).post('/v1/search').set('x-api-key', searchKey).send(body(intent));
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      const reference = await runSearch(exact, searchBodySchema.parse(body(intent)));
      expect(res.body.message.items.length, label).toBeGreaterThan(0);
      if (!res.body.message.meta.total_estimated) expect(res.body.message.meta.total, label).toBe(reference.message.meta.total);
      samePage(label, res.body.message.items, JSON.parse(JSON.stringify(reference.message.items)));
    }
    if (inject('vectorBackend') === 'pgvector') {
      // The answers came through the graph's HNSW index, not from the tail alone. A backend that
      // flushed its statistics less than a second before defers them, and an idle one flushes
      // them 10 s later (PGSTAT_MIN_INTERVAL, PGSTAT_IDLE_INTERVAL in PostgreSQL's pgstat.c): a
      // 10 s wait raced that.
      await until('the HNSW index scanned', async () => {
        await platform.ctx.pool.query('SELECT pg_stat_clear_snapshot()');
        const { rows: [scans] } = await platform.ctx.pool.query(
          `SELECT coalesce(sum(idx_scan), 0)::int AS n FROM pg_stat_user_indexes WHERE indexrelname LIKE 'items_embedding_hnsw_h384_g%'`);
        return scans.n > 0;
      }, 30_000);
      // Held off (its lock taken here), the upkeep leaves a changed row in the tail, and the
      // search service's gauge counts it.
      const holder = await platform.ctx.pool.connect();
      try {
        await holder.query(`SELECT pg_advisory_lock(hashtext('ldp:pgvector-graph'))`);
        const res = await request(platform.url('signals')).post(`/api/v1/items/${anchor.item_id}/lifecycle`)
          .set('x-api-key', await platform.apiKey('signals')).send({ lifecycle_status: 'paused' });
        expect(res.status, JSON.stringify(res.body)).toBe(200);
        await until('the paused item counted in the tail', async () =>
          sample((await request(platform.url('search')).get('/metrics')).text, 'search_index_pending_changes', {}) === 1, 20_000);
      } finally {
        await holder.query(`SELECT pg_advisory_unlock(hashtext('ldp:pgvector-graph'))`);
        holder.release();
      }
    }
  });
});
