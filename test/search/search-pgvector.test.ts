/**
 * The two vector backends on one small fixture: the index schema (sql/004_search_index.sql and
 * sql/011_search_ann.sql, sql/015_search_f16.sql, sql/017_search_words.sql, sql/019_search_geo_cells.sql,
 * sql/034_search_pgvector_graph.sql) migrated into PGlite with real pgvector compiled to WASM
 * (@electric-sql/pglite-pgvector) and into the embedded PostgreSQL (in-process usearch index),
 * the same rows written to both, and the same searches run by the same query builder, each through
 * its vector index (exactMaxRows 0), must give the same results. The HNSW index must serve the
 * relevance order (its ORDER BY carries no tiebreaker).
 */
import { readFile } from 'node:fs/promises';
import { PGlite } from '@electric-sql/pglite';
import { vector } from '@electric-sql/pglite-pgvector';
import { pg_trgm } from '@electric-sql/pglite/contrib/pg_trgm';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withTransaction } from '../../lib/platform/db.ts';
import { createHashingProvider } from '../../lib/search/embeddings/index.ts';
import { contentHash } from '../../lib/search/indexer.ts';
import { geoCells } from '../../lib/search/geo-cells.ts';
import { loadNetwork } from '../../lib/network/config.ts';
import { createSearchEngine } from '../../lib/search/engine.ts';
import { runSearch, type SearchEngine, type SearchItem } from '../../lib/search/query.ts';
import { searchBodySchema } from '../../lib/search/request.ts';
import { readVectorBackend, type SqlRunner } from '../../lib/search/vector-backend.ts';
import { buildGeneration, graphIndexName } from '../../lib/search/pgvector-graph.ts';
import { SQL_DIR } from '../../lib/platform/migrate.ts';
import { createTestDatabase, tempDir } from '../helpers/platform.ts';
import { openUsearchIndex, type UsearchIndex } from '../../lib/search/usearch-index.ts';
import { createLogger } from '../../lib/platform/logger.ts';
import { rm } from 'node:fs/promises';

const ROWS = 1200;
const KINDS = [
  ['Veterinary Hospital', 'Medical'], ['Primary Health Centre', 'Medical'], ['Govt High School', 'Education'], ['Girls Senior Secondary School', 'Education'],
  ['Bus Stand', 'Transport/Admin'], ['Gram Panchayat Office', 'Transport/Admin'], ['Milk Collection Centre', 'Agro'], ['Anganwadi Centre', 'Education'],
  ['Industrial Training Institute', 'Education'], ['Rice Mill', 'Agro'], ['Sub Health Centre', 'Medical'], ['Post Office', 'Transport/Admin'],
] as const;
const VILLAGES = ['Karora', 'Rajound', 'Pundri', 'Siwan', 'Guhla', 'Cheeka', 'Kalayat', 'Dhand', 'Habri', 'Kaul', 'Titram', 'Balu', 'Mundri', 'Sajuma'];
const DISTRICTS = ['Kaithal', 'Karnal', 'Jind', 'Kurukshetra'];

/** A deterministic pseudo-random sequence (mulberry32), so both databases and every run see the same data. */
function random(seed: number) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const provider = createHashingProvider(0.2);
let pglite: PGlite;
let pool: pg.Pool;
let pgvectorEngine: SearchEngine;
let exactEngine: SearchEngine;
let usearch: UsearchIndex;
let dataDir: string;
const queries: { sql: string; params?: unknown[] }[] = [];
/** When set, hnsw.ef_search and max_scan_tuples are lowered to this: the scan gives up early, as on a large index. */
let scanLimit: number | undefined;
/** When set, hnsw.ef_search alone is lowered to this: a narrow beam, widened by the iterative scan, misses neighbours. */
let beam: number | undefined;
/** The exact path for every search (no index): the reference of what a page should be. */
let bruteForce: SearchEngine;
/**
 * At this size the planner would rather sort than walk the index; with scans that need a sort
 * turned off in the search's transaction it takes the HNSW index wherever the SQL lets it, so these
 * tests run the index path (and fail should the ORDER BY stop matching the index).
 */
const PREFER_INDEX = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true), set_config('enable_sort', 'off', true)`;

async function rows() {
  const next = random(42);
  const out = [];
  for (let i = 0; i < ROWS; i++) {
    const [kind, category] = KINDS[Math.floor(next() * KINDS.length)];
    const village = VILLAGES[Math.floor(next() * VILLAGES.length)];
    const district = DISTRICTS[Math.floor(next() * DISTRICTS.length)];
    const state = { name: `${kind} ${village} ${i}`, category, district, state: 'Haryana', capacity: Math.floor(next() * 500) };
    const text = `Name: ${state.name}\nCategory: ${category}\nDistrict: ${district}\nState: Haryana`;
    const lat = 29 + next() * 1.5;
    const lng = 75.8 + next() * 1.5;
    out.push({
      item_id: `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`, item_state: state, item_locations: [{ lat, lng }], lat, lng,
      geo_cells: geoCells([{ lat, lng }]), // as the indexer writes them
      created_at: new Date(Date.UTC(2025, 0, 1) + i * 60_000).toISOString(), lifecycle_status: i % 17 === 0 ? 'paused' : 'live',
      search_text: text, content_hash: contentHash(text), embedding: Array.from((await provider.embed([text]))[0]),
    });
  }
  return out;
}

/** The same INSERTs for both databases. */
async function load(db: SqlRunner, data: Awaited<ReturnType<typeof rows>>) {
  for (let i = 0; i < data.length; i += 200) {
    const chunk = JSON.stringify(data.slice(i, i + 200));
    await db.query(
      `INSERT INTO search.items (item_id, item_network, item_domain, item_type, item_state, item_locations, geo_cells, created_at, source_updated_at,
         lifecycle_status, search_words, content_hash, model_id, model_quantization, model_dimensions, embedding)
       SELECT item_id, 'local-discovery', 'provider', 'facility', item_state, item_locations, geo_cells, created_at, created_at, lifecycle_status,
              strip(to_tsvector('simple', search_text)), content_hash, $2, $3, $4, search.embedding_of(embedding)
         FROM jsonb_to_recordset($1::jsonb) AS d(item_id uuid, item_state jsonb, item_locations jsonb, geo_cells integer[], created_at timestamptz,
           lifecycle_status text, search_text text, content_hash text, embedding real[])`,
      [chunk, provider.version.model_id, provider.version.quantization, provider.version.dimensions]);
    await db.query(
      `INSERT INTO search.item_locations (item_id, position, lat, lng)
       SELECT item_id, 0, lat, lng FROM jsonb_to_recordset($1::jsonb) AS d(item_id uuid, lat float8, lng float8)`, [chunk]);
  }
}

beforeAll(async () => {
  const data = await rows();
  const network = await loadNetwork('local-discovery');

  pglite = new PGlite({ extensions: { vector, pg_trgm } });
  await pglite.exec('CREATE SCHEMA search');
  await pglite.exec(await readFile(`${SQL_DIR}/004_search_index.sql`, 'utf8'));
  await pglite.exec(await readFile(`${SQL_DIR}/011_search_ann.sql`, 'utf8'));
  await pglite.exec(await readFile(`${SQL_DIR}/015_search_f16.sql`, 'utf8'));
  await pglite.exec(await readFile(`${SQL_DIR}/017_search_words.sql`, 'utf8'));
  await pglite.exec(await readFile(`${SQL_DIR}/019_search_geo_cells.sql`, 'utf8'));
  await pglite.exec(await readFile(`${SQL_DIR}/034_search_pgvector_graph.sql`, 'utf8'));
  await pglite.exec(await readFile(`${SQL_DIR}/036_search_cells_written.sql`, 'utf8'));
  expect(await readVectorBackend(pglite)).toBe('pgvector');
  await load(pglite, data);
  await buildGeneration(pglite, provider.version.dimensions, { concurrently: false });
  await pglite.exec('ANALYZE');
  pgvectorEngine = createSearchEngine({
    network, backend: 'pgvector', provider, exactMaxRows: 0, totalExactBound: ROWS,
    // Records the SQL it runs, to check the plans below.
    transaction: (fn) => pglite.transaction((tx) => fn({
      query: async (sql: string, params?: unknown[]) => {
        queries.push({ sql, params });
        if (!sql.includes('hnsw.iterative_scan')) return tx.query(sql, params);
        await tx.query(PREFER_INDEX);
        const settings = await tx.query(sql, params);
        if (scanLimit) await tx.query(`SELECT set_config('hnsw.ef_search', '${scanLimit}', true), set_config('hnsw.max_scan_tuples', '${scanLimit}', true)`);
        if (beam) await tx.query(`SELECT set_config('hnsw.ef_search', '${beam}', true)`);
        return settings;
      },
    } as SqlRunner)),
  });

  pool = new pg.Pool({ connectionString: await createTestDatabase(), max: 2 });
  expect(await readVectorBackend(pool)).toBe('usearch');
  await load(pool, data);
  dataDir = await tempDir();
  // One build thread: the same rows give the same graph, so the comparison below is reproducible.
  usearch = openUsearchIndex({ pool: pool as never, logger: createLogger('silent'), dataDir, version: provider.version, threads: 1 });
  await usearch.whenSettled();
  expect(await usearch.size(pool)).toBe(data.filter((r) => r.lifecycle_status === 'live').length);
  exactEngine = createSearchEngine({ network, backend: 'usearch', provider, index: usearch, exactMaxRows: 0, totalExactBound: ROWS, transaction: (fn) => withTransaction(pool, fn) });
  bruteForce = createSearchEngine({ network, backend: 'usearch', provider, exactMaxRows: 1e9, totalExactBound: ROWS, transaction: (fn) => withTransaction(pool, fn) });
});
afterAll(async () => {
  await usearch?.close();
  await pglite?.close();
  await pool?.end();
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

const body = (intent: Record<string, unknown>, pagination: Record<string, unknown> = {}) => searchBodySchema.parse({
  context: { messageId: 'm', networkId: 'local-discovery', domain: 'provider', itemType: 'facility' },
  message: { intent, pagination },
});

const CASES: [string, Record<string, unknown>, Record<string, unknown>?][] = [
  ['text', { textSearch: 'veternary hospital' }],
  ['misspelt text with a filter', { textSearch: 'grils school', filters: [{ op: 'gte', target: 'item_state.capacity', value: 250 }] }],
  ['anchor', { item: { id: '00000000-0000-4000-8000-000000000005' } }],
  ['anchor narrowed by text', { item: { id: '00000000-0000-4000-8000-000000000005' }, textSearch: 'centre' }],
  ['text within a radius', { textSearch: 'milk', spatial: [{ op: 's_dwithin', geometry: { type: 'Point', coordinates: [76.5, 29.7] }, distanceMeters: 40_000 }] }],
  ['a deep page', { textSearch: 'school' }, { limit: 10, offset: 40 }],
  ['filters, newest', { filters: [{ op: 'eq', target: 'item_state.category', value: 'Agro' }, { op: 'in', target: 'item_state.district', value: ['Jind', 'Karnal'] }] }],
  ['nearest', { orderingCenter: { type: 'Point', coordinates: [76.4, 29.8] } }, { limit: 15, offset: 30 }],
];

/**
 * The same results: the same scores (and distances) position by position, the same items in the
 * same order where there is no score; where there is, an item may differ only by changing places
 * with an equal-scored one (the index orders by distance alone, and float4 and float8 arithmetic
 * may swap near-equal scores), or at the end of the page among items scored like the last one.
 */
function sameResults(a: SearchItem[], b: SearchItem[]) {
  expect(a).toHaveLength(b.length);
  const distances = new Map(b.map((i) => [i.item_id, i.distanceMeters]));
  a.forEach((item, n) => {
    if (item.score !== undefined) expect(item.score).toBeCloseTo(b[n].score!, 5);
    if (distances.get(item.item_id) !== undefined) expect(item.distanceMeters).toBeCloseTo(distances.get(item.item_id)!, 3);
  });
  if (a[0]?.score === undefined) {
    expect(a.map((i) => i.item_id)).toEqual(b.map((i) => i.item_id));
    return;
  }
  const inB = new Set(b.map((i) => i.item_id));
  for (const item of a) if (!inB.has(item.item_id)) expect(Math.abs(item.score! - a.at(-1)!.score!)).toBeLessThan(1e-5);
}

describe('pgvector (PGlite) and usearch (embedded PostgreSQL) backends', () => {
  for (const [label, intent, pagination] of CASES) {
    it(`give the same results: ${label}`, async () => {
      const [a, b] = [await runSearch(pgvectorEngine, body(intent, pagination)), await runSearch(exactEngine, body(intent, pagination))];
      expect(a.message.meta).toEqual(b.message.meta);
      expect(a.message.meta.total).toBeGreaterThan(0);
      sameResults(a.message.items, b.message.items);
    });
  }

  it('serves the relevance order from the HNSW index, iterative scan on, with no tiebreaker', async () => {
    queries.length = 0;
    await runSearch(pgvectorEngine, body({ textSearch: 'veterinary hospital' }));
    const page = queries.find((q) => /ann_gen <= 1 ORDER BY \(i\.embedding::halfvec\(384\) <=> \$\d+::real\[\]::halfvec\(384\)\) LIMIT/.test(q.sql));
    expect(page).toBeDefined();
    expect(queries.some((q) => q.sql.includes(`set_config('hnsw.iterative_scan', 'strict_order', true)`))).toBe(true);
    // The same statement with the same parameters is planned on the index.
    const plan = await pglite.transaction(async (tx) => {
      await tx.query(`SELECT set_config('hnsw.iterative_scan', 'strict_order', true)`);
      await tx.query(PREFER_INDEX);
      const explained = await tx.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${page!.sql}`, page!.params);
      return explained.rows.map((r) => r['QUERY PLAN']).join('\n');
    });
    expect(plan).toContain(graphIndexName(384, 1));
    // Exactly one read of the page: the index gave it complete.
    expect(queries.filter((q) => /ORDER BY .* LIMIT/.test(q.sql))).toHaveLength(1);
  });

  it('completes a page by the exact path when the index scan gives up before enough rows pass the filters', async () => {
    const intent = { textSearch: 'centre', filters: [{ op: 'lte', target: 'item_state.capacity', value: 25 }] };
    scanLimit = 10;
    queries.length = 0;
    try {
      const [a, b] = [await runSearch(pgvectorEngine, body(intent)), await runSearch(exactEngine, body(intent))];
      // The index reads, then one exact read of every candidate (no ORDER BY: ranked in process).
      const exactReads = queries.filter((q) => /encode\(search\.embedding_f16\(i\.embedding\), 'base64'\) AS e FROM search\.items i WHERE/.test(q.sql) && !/ORDER BY/.test(q.sql));
      expect(exactReads.length).toBeGreaterThan(0);
      expect(a.message.meta.total).toBeGreaterThan(0);
      expect(a.message.items).toHaveLength(Math.min(20, a.message.meta.total));
      sameResults(a.message.items, b.message.items);
    } finally {
      scanLimit = undefined;
    }
  });

  it('ranks the lexical matches the index missed with the similar items it found', async () => {
    // A beam of one: the graph's first 200 candidates, all similar enough, are not the nearest ones.
    beam = 1;
    try {
      for (const text of ['veterinary hospital', 'rice mill', 'post office']) {
        const [a, b] = [await runSearch(pgvectorEngine, body({ textSearch: text })), await runSearch(bruteForce, body({ textSearch: text }))];
        // The page; the total may lack similar items that are not lexical matches (the graph missed them).
        sameResults(a.message.items, b.message.items);
      }
    } finally {
      beam = undefined;
    }
  });
});
