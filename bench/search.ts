/**
 * Search benchmark (`npm run bench:search`) over the real PMGSY facilities of ../shared/data.
 *
 * 1. Exact backend (embedded PostgreSQL, own temp dir and port) at BENCH_EXACT_ITEMS (20,000):
 *    the embedding provider's raw throughput (`embed` over the items' searchable texts, batches of
 *    1,000) beside the indexing throughput of the real `search-index-items` task run by the real
 *    worker (jobs of 1,000 snapshots, as signals enqueues them; from enqueue to the last row); then
 *    (the raw figure is the mean of a run before and one after indexing: the machine's load drifts);
 *    then the latency of text, filter, spatial, anchor and combined queries through `POST /v1/search`
 *    over HTTP, one at a time and BENCH_CONCURRENCY (16) at a time.
 * 2. pgvector backend at BENCH_PGVECTOR_ITEMS (100,000) in PGlite with pgvector (WASM, in this
 *    process; no server can sit on it, so queries call the search core directly, and PGlite runs
 *    one query at a time whatever the concurrency): load, HNSW build, the same query kinds.
 * 3. When the tiny offline model is in ../shared/models: the transformers provider's raw and
 *    indexing throughput at BENCH_TRANSFORMERS_ITEMS (5,000), on the same PostgreSQL.
 * The provider of parts 1–2 is EMBEDDING_PROVIDER's (hashing on a machine without a model).
 * BENCH_QUERIES (default 50) queries per kind and mode, after warm-ups. Prints the figures and
 * writes bench/results/search.json with the machine's core count and load average.
 */
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { PGlite } from '@electric-sql/pglite';
import { vector } from '@electric-sql/pglite-pgvector';
import pg from 'pg';
import { startPlatform, type PlatformHandle } from '../bin/platform.ts';
import { createApiKey } from '../lib/platform/api-keys.ts';
import { loadConfig } from '../lib/platform/config.ts';
import { withTransaction } from '../lib/platform/db.ts';
import { startEmbeddedPostgres } from '../lib/platform/embedded-postgres.ts';
import type { EmbeddingProvider } from '../lib/search/embeddings/index.ts';
import { enqueueMany } from '../lib/platform/jobs.ts';
import { createItemStateValidators, itemInputProblem, SEARCH_INDEX_PRIORITY, SEARCH_INDEX_TASK, type ItemRecord } from '../lib/network/items.ts';
import { createLogger } from '../lib/platform/logger.ts';
import { SQL_DIR } from '../lib/platform/migrate.ts';
import { loadNetwork } from '../lib/network/config.ts';
import { searchText } from '../lib/network/search-text.ts';
import { createSearchEngine } from '../lib/search/engine.ts';
import { contentHash } from '../lib/search/indexer.ts';
import { runSearch } from '../lib/search/query.ts';
import { searchBodySchema } from '../lib/search/request.ts';
import { ensureVectorIndex } from '../lib/search/vector-backend.ts';
import { freePort } from '../lib/platform/free-port.ts';
import { facilityItems } from './pmgsy-facilities.ts';

const repo = fileURLToPath(new URL('..', import.meta.url));
const DATA = path.resolve(repo, '../shared/data/pmgsy-rural-facilities/pmgsy_facilities_south_west_india.csv');
const MODELS = path.resolve(repo, '../shared/models');
const TINY = 'minishlab/m2v-test-vq128';
const EXACT_ITEMS = Number(process.env.BENCH_EXACT_ITEMS ?? 20_000);
const PGVECTOR_ITEMS = Number(process.env.BENCH_PGVECTOR_ITEMS ?? 100_000);
const TRANSFORMERS_ITEMS = Number(process.env.BENCH_TRANSFORMERS_ITEMS ?? 5_000);
const QUERIES = Number(process.env.BENCH_QUERIES ?? 50);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 16);
const BATCH = 1000;
const RESULTS = path.join(repo, 'bench/results/search.json');

if (!existsSync(DATA)) {
  process.stderr.write(`No dataset at ${DATA} (../shared must sit beside the repository)\n`);
  process.exit(1);
}

const log = (line: string) => process.stdout.write(`${line}\n`);
const round = (x: number, digits = 1) => Math.round(x * 10 ** digits) / 10 ** digits;
const loadAverage = () => os.loadavg().map((l) => round(l, 2));


// ---------------------------------------------------------------------------------------------
// Data: the first rows of the large PMGSY file as provider item snapshots (as onboarded)

const network = await loadNetwork('local-discovery');
const domain = network.domains.get('provider')!;

async function readSnapshots(count: number): Promise<ItemRecord[]> {
  const validators = createItemStateValidators(network);
  const out: ItemRecord[] = [];
  const start = Date.UTC(2026, 0, 1);
  for await (const item of facilityItems(DATA, network, domain, (n) => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`)) {
    if (out.length >= count) break;
    if (itemInputProblem(network, validators, item)) continue; // e.g. coordinates outside India
    const at = new Date(start + out.length * 1000).toISOString();
    out.push({ ...item, item_instance_url: null, item_schema_url: null, created_by: null, created_at: at, updated_at: at, lifecycle_status: 'live' });
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Queries

type Intent = Record<string, unknown>;
const TEXTS = ['veternary hospital', 'primary health centre', 'govt high school', 'gram panchayat office', 'milk collection centre',
  'bus stand', 'anganwadi', 'rice mill', 'grampanchyat', 'zilla parishad school'];

/** Query intents per kind, drawn deterministically from the data. */
function intents(items: ItemRecord[], n: number): Record<string, Intent[]> {
  const pick = (i: number) => items[(i * 7919) % items.length];
  const point = (item: ItemRecord) => ({ type: 'Point', coordinates: [item.item_locations[0].lng, item.item_locations[0].lat] });
  const districts = [...new Set(items.map((i) => i.item_state.district as string))];
  const categories = ['Education', 'Medical', 'Transport/Admin', 'Agro'];
  const make = (f: (i: number) => Intent) => Array.from({ length: n }, (_, i) => f(i));
  return {
    text: make((i) => ({ textSearch: TEXTS[i % TEXTS.length] })),
    filter: make((i) => ({ filters: [
      { op: 'eq', target: 'item_state.category', value: categories[i % categories.length] },
      { op: 'in', target: 'item_state.district', value: [districts[i % districts.length], districts[(i + 3) % districts.length]] },
    ] })),
    spatial: make((i) => ({ spatial: [{ op: 's_dwithin', geometry: point(pick(i)), distanceMeters: 10_000 }] })),
    anchor: make((i) => ({ item: { id: pick(i).item_id } })),
    combined: make((i) => ({
      textSearch: TEXTS[i % TEXTS.length],
      filters: [{ op: 'neq', target: 'item_state.category', value: 'Agro' }],
      spatial: [{ op: 's_dwithin', geometry: point(pick(i)), distanceMeters: 50_000 }],
      orderingCenter: point(pick(i + 1)),
      sort: 'relevance',
    })),
  };
}

const body = (intent: Intent, i: number) => ({
  context: { messageId: `bench-${i}`, networkId: network.id, domain: domain.name, itemType: domain.itemType },
  message: { intent, pagination: { limit: 20, offset: i % 3 === 0 ? 20 : 0 } },
});

interface Latency { n: number; p50_ms: number; p95_ms: number; p99_ms: number; mean_total: number }

/** Runs `queries` with `concurrency` in flight; latencies of each. */
async function measure(queries: Intent[], concurrency: number, run: (b: ReturnType<typeof body>) => Promise<number>): Promise<Latency> {
  for (let i = 0; i < 3; i++) await run(body(queries[i % queries.length], i)); // warm-up
  const times: number[] = [];
  let totals = 0;
  let next = 0;
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < queries.length) {
      const i = next++;
      const started = performance.now();
      totals += await run(body(queries[i], i));
      times.push(performance.now() - started);
    }
  }));
  times.sort((a, b) => a - b);
  const at = (q: number) => round(times[Math.min(times.length - 1, Math.ceil(times.length * q) - 1)]);
  return { n: times.length, p50_ms: at(0.5), p95_ms: at(0.95), p99_ms: at(0.99), mean_total: Math.round(totals / times.length) };
}

async function latencies(kinds: Record<string, Intent[]>, run: (b: ReturnType<typeof body>) => Promise<number>, label: string) {
  const out: Record<string, { sequential: Latency; concurrent: Latency }> = {};
  for (const [kind, queries] of Object.entries(kinds)) {
    const sequential = await measure(queries, 1, run);
    const concurrent = await measure([...queries, ...queries, ...queries].slice(0, Math.max(queries.length, CONCURRENCY * 4)), CONCURRENCY, run);
    out[kind] = { sequential, concurrent };
    log(`${label} ${kind.padEnd(9)} 1 at a time p50 ${String(sequential.p50_ms).padStart(7)} p95 ${String(sequential.p95_ms).padStart(7)} p99 ${String(sequential.p99_ms).padStart(7)} ms | `
      + `${CONCURRENCY} at a time p50 ${String(concurrent.p50_ms).padStart(7)} p95 ${String(concurrent.p95_ms).padStart(7)} p99 ${String(concurrent.p99_ms).padStart(7)} ms | mean total ${sequential.mean_total}`);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Throughput: the provider alone, then the real task on the real worker

async function rawThroughput(provider: EmbeddingProvider, texts: string[]): Promise<number> {
  await provider.embed(texts.slice(0, 50)); // warm-up
  const started = performance.now();
  for (let i = 0; i < texts.length; i += BATCH) await provider.embed(texts.slice(i, i + BATCH));
  return texts.length / ((performance.now() - started) / 1000);
}

async function indexingThroughput(platform: PlatformHandle, items: ItemRecord[]): Promise<number> {
  const { pool } = platform.ctx;
  const started = performance.now();
  await withTransaction(pool, (client) => enqueueMany(client, Array.from({ length: Math.ceil(items.length / BATCH) }, (_, k) => ({
    task: SEARCH_INDEX_TASK, payload: { items: items.slice(k * BATCH, (k + 1) * BATCH) }, priority: SEARCH_INDEX_PRIORITY,
  }))));
  for (;;) {
    const { rows: [{ n }] } = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM search.items');
    if (n >= items.length) break;
    const { rows: failed } = await pool.query(
      `SELECT j.last_error FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks t ON t.id = j.task_id
        WHERE t.identifier = $1 AND j.last_error IS NOT NULL LIMIT 1`, [SEARCH_INDEX_TASK]);
    if (failed.length) throw new Error(`indexing failed: ${failed[0].last_error}`);
    await new Promise((r) => setTimeout(r, 20));
  }
  const seconds = (performance.now() - started) / 1000;
  await pool.query('ANALYZE search.items, search.item_locations');
  return items.length / seconds;
}

async function startOn(url: string, env: Record<string, string>): Promise<PlatformHandle> {
  const dataDir = await mkdtemp(path.join(dir, 'data-'));
  const config = loadConfig({ ...process.env, LOG_LEVEL: 'warn', DATA_DIR: dataDir, DATABASE_URL: url, SEARCH_PORT: '0', ...env });
  return startPlatform(config, createLogger(config.LOG_LEVEL), url, { services: ['search'], worker: true });
}

// ---------------------------------------------------------------------------------------------

const results: Record<string, unknown> = {
  benchmark: 'search', dataset: path.relative(path.resolve(repo, '..'), DATA), cpus: os.cpus().length, cpu_model: os.cpus()[0]?.model,
  node: process.version, load_average_start: loadAverage(), measured_at: new Date().toISOString(),
};
const all = await readSnapshots(Math.max(EXACT_ITEMS, PGVECTOR_ITEMS, TRANSFORMERS_ITEMS));
log(`read ${all.length} facilities from ${path.basename(DATA)}`);

const dir = await mkdtemp(path.join(os.tmpdir(), 'ldp-bench-search-'));
const db = await startEmbeddedPostgres({ dataDir: dir, port: await freePort() });
const server = db.url.replace(/[^/]+$/, '');
const createDatabase = async (name: string) => {
  const admin = new pg.Client({ connectionString: `${server}postgres` });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  return `${server}${name}`;
};

let engineProvider: EmbeddingProvider | undefined;
try {
  // 3. (measured first, while this process is fresh: PGlite leaves gigabytes of heap behind,
  //    whose collection would slow the indexing measured here) transformers with the tiny offline model
  if (existsSync(path.join(MODELS, TINY))) {
    const items = all.slice(0, TRANSFORMERS_ITEMS);
    const platform = await startOn(await createDatabase('bench_transformers'), {
      EMBEDDING_PROVIDER: 'transformers', EMBEDDING_MODEL: TINY, EMBEDDING_MODEL_PATH: MODELS,
    });
    try {
      const provider = await platform.ctx.embeddings();
      const texts = items.map((i) => searchText(domain, i.item_state));
      const rawBefore = await rawThroughput(provider, texts);
      const indexing = await indexingThroughput(platform, items);
      const raw = (rawBefore + await rawThroughput(provider, texts)) / 2;
      log(`transformers (${TINY}) ${items.length} items: raw ${Math.round(raw)} items/s, indexing ${Math.round(indexing)} items/s (${Math.round((indexing / raw) * 100)}%)`);
      results.transformers_tiny_model = {
        items: items.length, provider: provider.name, model: provider.version,
        raw_items_per_s: Math.round(raw), indexing_items_per_s: Math.round(indexing), indexing_share_of_raw: round(indexing / raw, 3),
      };
    } finally {
      await platform.stop();
    }
  }

  // 1. Exact backend
  {
    const items = all.slice(0, EXACT_ITEMS);
    const platform = await startOn(await createDatabase('bench_exact'), {});
    try {
      const provider = await platform.ctx.embeddings();
      engineProvider = provider;
      const texts = items.map((i) => searchText(domain, i.item_state));
      const rawBefore = await rawThroughput(provider, texts);
      const indexing = await indexingThroughput(platform, items);
      const raw = (rawBefore + await rawThroughput(provider, texts)) / 2;
      log(`exact    ${items.length} items, provider ${provider.name} (${provider.version.model_id}): raw ${Math.round(raw)} items/s, indexing ${Math.round(indexing)} items/s (${Math.round((indexing / raw) * 100)}%)`);
      const key = (await createApiKey(platform.ctx.pool, 'search', 'bench')).key;
      const url = `${platform.services[0].url}/v1/search`;
      const run = async (b: unknown) => {
        const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': key }, body: JSON.stringify(b) });
        const json = await res.json() as { message?: { meta: { total: number } } };
        if (res.status !== 200) throw new Error(`search answered ${res.status}: ${JSON.stringify(json)}`);
        return json.message!.meta.total;
      };
      results.exact = {
        backend: 'exact', items: items.length, provider: provider.name, model: provider.version,
        raw_items_per_s: Math.round(raw), indexing_items_per_s: Math.round(indexing), indexing_share_of_raw: round(indexing / raw, 3),
        queries_via: 'POST /v1/search over HTTP', queries: await latencies(intents(items, QUERIES), run, 'exact   '),
      };
    } finally {
      await platform.stop();
    }
  }

  // 2. pgvector backend (PGlite)
  {
    const items = all.slice(0, PGVECTOR_ITEMS);
    const provider = engineProvider!;
    const pglite = new PGlite({ extensions: { vector } });
    try {
      await pglite.exec('CREATE SCHEMA search');
      await pglite.exec(await readFile(path.join(SQL_DIR, '004_search_index.sql'), 'utf8'));
      const loadStarted = performance.now();
      for (let k = 0; k < items.length; k += BATCH) {
        const chunk = items.slice(k, k + BATCH);
        const texts = chunk.map((i) => searchText(domain, i.item_state));
        const vectors = await provider.embed(texts);
        const data = JSON.stringify(chunk.map((item, n) => ({
          ...item, search_text: texts[n], content_hash: contentHash(texts[n]), embedding: Array.from(vectors[n]),
          lat: item.item_locations[0].lat, lng: item.item_locations[0].lng,
        })));
        await pglite.query(
          `INSERT INTO search.items (item_id, item_network, item_domain, item_type, item_state, item_locations, created_at, source_updated_at,
             lifecycle_status, search_text, content_hash, model_id, model_quantization, model_dimensions, embedding)
           SELECT item_id, item_network, item_domain, item_type, item_state, item_locations, created_at, updated_at, lifecycle_status,
                  search_text, content_hash, $2, $3, $4, embedding
             FROM json_to_recordset($1::json) AS d(item_id uuid, item_network text, item_domain text, item_type text, item_state jsonb,
               item_locations jsonb, created_at timestamptz, updated_at timestamptz, lifecycle_status text, search_text text,
               content_hash text, embedding real[])`,
          [data, provider.version.model_id, provider.version.quantization, provider.version.dimensions]);
        await pglite.query(`INSERT INTO search.item_locations (item_id, position, lat, lng)
          SELECT item_id, 0, lat, lng FROM json_to_recordset($1::json) AS d(item_id uuid, lat float8, lng float8)`, [data]);
      }
      const loadSeconds = (performance.now() - loadStarted) / 1000;
      const buildStarted = performance.now();
      await ensureVectorIndex(pglite, 'pgvector', provider.version);
      const buildSeconds = (performance.now() - buildStarted) / 1000;
      await pglite.exec('ANALYZE');
      log(`pgvector ${items.length} items loaded into PGlite in ${loadSeconds.toFixed(1)} s, HNSW index built in ${buildSeconds.toFixed(1)} s`);
      const engine = createSearchEngine({ network, backend: 'pgvector', provider, transaction: (fn) => pglite.transaction((tx) => fn(tx)) });
      const run = async (b: unknown) => (await runSearch(engine, searchBodySchema.parse(b))).message.meta.total;
      results.pgvector = {
        backend: 'pgvector (PGlite, WASM, one query at a time)', items: items.length, provider: provider.name, model: provider.version,
        load_seconds: round(loadSeconds), hnsw_build_seconds: round(buildSeconds), queries_via: 'search core (runSearch) in process',
        queries: await latencies(intents(items, QUERIES), run, 'pgvector'),
      };
    } finally {
      await pglite.close();
    }
  }

  results.load_average_end = loadAverage();
  await mkdir(path.dirname(RESULTS), { recursive: true });
  await writeFile(RESULTS, `${JSON.stringify(results, null, 2)}\n`);
  log(`wrote ${path.relative(repo, RESULTS)} (load average ${loadAverage().join(' ')})`);
} finally {
  await db.stop();
  await rm(dir, { recursive: true, force: true });
}
