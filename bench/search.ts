/**
 * Search benchmark (`npm run bench:search`) at the real dataset's scale (issue 14): the large
 * PMGSY facilities file of ../shared/data (BENCH_ITEMS rows, default all valid ones: 266,9xx).
 *
 * 1. Indexing: the rows as provider item snapshots, written by the real `search-index-items` task
 *    run by the real worker (jobs of 1,000, as signals enqueues them) into embedded PostgreSQL
 *    (EMBEDDING_PROVIDER's provider; hashing on a machine without a model). Then VACUUM ANALYZE.
 * 2. Storage: bytes per item of `search.items` (table with TOAST) and of its indexes.
 * 3. The search service (and signals, for discover) as separate processes (`ldp serve`) on a fresh
 *    DATA_DIR: the in-process vector index is built from empty (build time from /ready), its file's
 *    size on disk.
 * 4. Latency of text, filter, spatial, anchor, combined and newest queries through
 *    `POST /v1/search`, and of discover through `POST /api/v1/network/item/discover`, over HTTP,
 *    one at a time and BENCH_CONCURRENCY (16) at a time: p50/p95/p99 (BENCH_QUERIES requests per
 *    kind one at a time, BENCH_CONCURRENT_REQUESTS at BENCH_CONCURRENCY at a time, cycling through the same queries).
 * 5. recall@20 of the index against the exact ranking (brute force over every vector, in this
 *    process) over 200 queries (100 texts, 100 anchors); ties at the 20th score count as hits.
 * 6. Catch-up delay: an item re-indexed with another item's state (the real indexer), until the
 *    search service ranks it first for that other item as anchor (through the vector index).
 * 7. RSS of the search process (now and peak), and the load average at start and end.
 * Prints the figures and writes bench/results/search.json.
 *
 * The server path (issue 31): with BENCH_DATABASE_URL (an external PostgreSQL, e.g. with pgvector;
 * bench/bench-database.ts) everything runs on a fresh database of that server instead of an
 * embedded one, and the results go to bench/results/search-server.json; the vector index is then
 * pgvector's graph, built by the search service's upkeep at its start (step 3).
 *
 * Knobs for iterating (defaults: everything, from scratch, in a temporary directory):
 * - BENCH_ITEMS: rows of the file (default all valid ones);
 * - BENCH_QUERIES: queries per kind, each requested once one at a time (default 100);
 *   BENCH_CONCURRENCY (default 16); BENCH_CONCURRENT_REQUESTS (default 20 per client);
 * - BENCH_DIR: work in this directory and keep it: its PostgreSQL cluster is reused (migrations
 *   run again, so a new one is applied to the old data), and indexing is skipped when search.items
 *   already holds the rows (with BENCH_DATABASE_URL: the database ldp_bench_search_kept is);
 * - BENCH_KEEP_INDEX=1 (with BENCH_DIR): keep the search service's index file, so it loads instead
 *   of being built from empty (build time then measures the load);
 * - BENCH_CPU_PROF=dir: the services run with `node --cpu-prof`, profiles written to dir/<service>
 *   when they stop;
 * - BENCH_STEPS: a comma list of what to run after the storage figures, among text, filter,
 *   spatial, anchor, combined, newest, discover, recall, catchup (default all). bench/results/
 *   search.json is written only when all run.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { startPlatform } from '../bin/platform.ts';
import { createApiKey } from '../lib/platform/api-keys.ts';
import { loadConfig } from '../lib/platform/config.ts';
import { enqueueMany } from '../lib/platform/jobs.ts';
import { createItemStateValidators, itemInputProblem, SEARCH_INDEX_PRIORITY, SEARCH_INDEX_TASK, type ItemRecord } from '../lib/network/items.ts';
import { createLogger } from '../lib/platform/logger.ts';
import { loadNetwork } from '../lib/network/config.ts';
import { searchText } from '../lib/network/search-text.ts';
import { indexSnapshots } from '../lib/search/indexer.ts';
import { roundToHalf } from '../lib/search/half.ts';
import { exactSearch, MetricKind } from 'usearch';
import { freePort } from '../lib/platform/free-port.ts';
import { facilityItems } from './pmgsy-facilities.ts';
import { TEXTS } from './search-queries.ts';
import { benchDatabase, databaseFacts, resultsFor } from './bench-database.ts';

const repo = fileURLToPath(new URL('..', import.meta.url));
const DATA = path.resolve(repo, '../shared/data/pmgsy-rural-facilities/pmgsy_facilities_south_west_india.csv');
const ITEMS = Number(process.env.BENCH_ITEMS ?? Infinity);
const QUERIES = Number(process.env.BENCH_QUERIES ?? 100);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 16);
/**
 * Requests of a kind at BENCH_CONCURRENCY at a time (20 per client: 320). With 100 (6 per client),
 * one transient stall of the 2-core machine (~300 ms, in 4 of 54 runs on 2026-11-25) held all 16
 * in flight and was the p95 by itself; a stall still shows in p99.
 */
const CONCURRENT_REQUESTS = Number(process.env.BENCH_CONCURRENT_REQUESTS ?? CONCURRENCY * 20);
const RECALL_QUERIES = 200;
const BATCH = 1000;
const RESULTS = resultsFor(path.join(repo, 'bench/results/search.json'));
const ALL_STEPS = ['text', 'filter', 'spatial', 'anchor', 'combined', 'newest', 'discover', 'recall', 'catchup'];
const STEPS = new Set(process.env.BENCH_STEPS ? process.env.BENCH_STEPS.split(',').map((s) => s.trim()) : ALL_STEPS);
const KEEP_DIR = process.env.BENCH_DIR;
const KEEP_INDEX = KEEP_DIR !== undefined && process.env.BENCH_KEEP_INDEX === '1';

if (!existsSync(DATA)) {
  process.stderr.write(`No dataset at ${DATA} (../shared must sit beside the repository)\n`);
  process.exit(1);
}

const log = (line: string) => process.stdout.write(`${line}\n`);
const round = (x: number, digits = 1) => Math.round(x * 10 ** digits) / 10 ** digits;
const loadAverage = () => os.loadavg().map((l) => round(l, 2));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------------------------
// Data: the rows of the large PMGSY file as provider item snapshots (as onboarded)

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

/** Query intents per kind, drawn deterministically from the data. */
function intents(items: ItemRecord[], n: number): Record<string, Intent[]> {
  const pick = (i: number) => items[(i * 7919) % items.length];
  const point = (item: ItemRecord) => ({ type: 'Point', coordinates: [item.item_locations[0].lng, item.item_locations[0].lat] });
  const districts = [...new Set(items.map((i) => i.item_state.district as string))];
  const categories = [...new Set(items.map((i) => i.item_state.category as string))].slice(0, 6);
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
      filters: [{ op: 'neq', target: 'item_state.category', value: categories[0] }],
      spatial: [{ op: 's_dwithin', geometry: point(pick(i)), distanceMeters: 50_000 }],
      orderingCenter: point(pick(i + 1)),
      sort: 'relevance',
    })),
    newest: make(() => ({})),
  };
}

const searchBody = (intent: Intent, i: number) => ({
  context: { messageId: `bench-${i}`, networkId: network.id, domain: domain.name, itemType: domain.itemType },
  message: { intent, pagination: { limit: 20, offset: i % 3 === 0 ? 20 : 0 } },
});
const discoverBody = (q: string, i: number) => ({
  item_network: network.id, item_domain: domain.name, item_type: domain.itemType, q, limit: 20, offset: i % 3 === 0 ? 20 : 0,
});

interface Latency {
  n: number; p50_ms: number; p95_ms: number; p99_ms: number; mean_total: number; estimated_totals: number; native_fallbacks: number;
  /** CPU time per request of the service processes and of PostgreSQL (all its processes): what load on other work does not distort much. */
  cpu_ms_per_request?: Record<string, number>;
}
interface Answer { total: number; estimated: boolean; fallback?: boolean }

/** Runs `count` requests `request(i)` with `concurrency` in flight (after 3 warm-ups); latencies. */
async function measure(count: number, concurrency: number, request: (i: number) => Promise<Answer>): Promise<Latency> {
  for (let i = 0; i < 3; i++) await request(i);
  const cpuBefore = await cpuProbe();
  const times: number[] = [];
  let totals = 0;
  let estimated = 0;
  let fallbacks = 0;
  let next = 0;
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < count) {
      const i = next++;
      const started = performance.now();
      const answer = await request(i);
      times.push(performance.now() - started);
      totals += answer.total;
      if (answer.estimated) estimated++;
      if (answer.fallback) fallbacks++;
    }
  }));
  const cpuAfter = await cpuProbe();
  times.sort((a, b) => a - b);
  const at = (q: number) => round(times[Math.min(times.length - 1, Math.ceil(times.length * q) - 1)]);
  const cpu = Object.fromEntries(Object.keys(cpuAfter).map((k) => [k, round((cpuAfter[k] - (cpuBefore[k] ?? 0)) / times.length, 2)]));
  return {
    n: times.length, p50_ms: at(0.5), p95_ms: at(0.95), p99_ms: at(0.99), mean_total: Math.round(totals / times.length), estimated_totals: estimated, native_fallbacks: fallbacks,
    cpu_ms_per_request: cpu,
  };
}

/** CPU time (user + system, ms) used so far by the named processes; set once the services run. */
let cpuProbe: () => Promise<Record<string, number>> = async () => ({});
const TICK_MS = 10; // USER_HZ = 100 on Linux
/** `withChildren`: also the CPU of its children that have exited (cutime, cstime): the postmaster reaps its backends. */
async function processCpuMs(pid: number, withChildren = false): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ').map(Number);
  if (fields.length <= 14) return 0;
  return (fields[11] + fields[12] + (withChildren ? fields[13] + fields[14] : 0)) * TICK_MS;
}
/** The postmaster of `clusterDir` and its children (backends, whose CPU ends up in their own stat). */
async function postgresPids(clusterDir: string): Promise<number[]> {
  const postmaster = Number((await readFile(path.join(clusterDir, 'postmaster.pid'), 'utf8')).split('\n')[0]);
  const pids = [postmaster];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
    if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === postmaster) pids.push(Number(entry));
  }
  return pids;
}

// ---------------------------------------------------------------------------------------------
// Processes

/** Resident set size now (VmRSS) and at its peak so far (VmHWM) of a live process, in MB. */
async function rssMb(pid: number): Promise<{ now: number; peak: number }> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const kb = (name: string) => Number(new RegExp(`${name}:\\s+(\\d+) kB`).exec(status)![1]);
  return { now: round(kb('VmRSS') / 1024), peak: round(kb('VmHWM') / 1024) };
}

function serve(service: string, env: NodeJS.ProcessEnv): ChildProcess {
  const profile = process.env.BENCH_CPU_PROF ? ['--cpu-prof', '--cpu-prof-dir', path.resolve(process.env.BENCH_CPU_PROF, service)] : [];
  const child = spawn(process.execPath, [...profile, path.join(repo, 'bin/ldp.js'), 'serve', '--service', service], { cwd: repo, env, stdio: ['ignore', 'ignore', 'inherit'] });
  child.on('exit', (code, signal) => {
    if (code !== 0 && signal !== 'SIGTERM') process.stderr.write(`${service} exited with ${code ?? signal}\n`);
  });
  return child;
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  await exited;
}

async function ready(url: string): Promise<Record<string, any>> {
  for (;;) {
    const res = await fetch(`${url}/ready`).catch(() => undefined);
    if (res?.ok) return res.json() as Promise<Record<string, any>>;
    await sleep(100);
  }
}

// ---------------------------------------------------------------------------------------------

const results: Record<string, unknown> = {
  benchmark: 'search', dataset: path.relative(path.resolve(repo, '..'), DATA), cpus: os.cpus().length, cpu_model: os.cpus()[0]?.model,
  node: process.version, load_average_start: loadAverage(), measured_at: new Date().toISOString(),
};
const items = await readSnapshots(ITEMS);
log(`read ${items.length} facilities from ${path.basename(DATA)}`);

const dir = KEEP_DIR ? path.resolve(KEEP_DIR) : await mkdtemp(path.join(os.tmpdir(), 'ldp-bench-search-'));
await mkdir(dir, { recursive: true });
const db = await benchDatabase({ dataDir: path.join(dir, 'pg'), label: 'search', keep: KEEP_DIR !== undefined });
const children: ChildProcess[] = [];
try {
  const databaseUrl = db.url;
  const secrets = { INTERNAL_API_KEY: `ldp_internal_${randomBytes(32).toString('base64url')}`, PII_KEY: randomBytes(32).toString('base64') };
  const baseEnv = { ...process.env, LOG_LEVEL: 'warn', DATABASE_URL: databaseUrl, WORKER_METRICS_PORT: '0', ...secrets };

  // 1. Indexing through the real task and worker (in this process).
  // BACKGROUND_NICE 0: this worker runs on this process's thread (not in a thread of its own as
  // under `ldp start`), so its nice value would slow the client and, inherited, the services this
  // process starts, which run at nice 0 when deployed.
  const config = loadConfig({ ...baseEnv, DATA_DIR: path.join(dir, 'worker'), BACKGROUND_NICE: '0' });
  const platform = await startPlatform(config, createLogger(config.LOG_LEVEL), databaseUrl, { services: [], worker: true });
  const { pool } = platform.ctx;
  const provider = await platform.ctx.embeddings();
  results.database = await databaseFacts(databaseUrl);
  const { rows: [{ n: present }] } = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM search.items');
  if (present === items.length) log(`search.items already holds ${present} rows (BENCH_DIR): indexing skipped`);
  const indexingStarted = performance.now();
  // One job per batch, each in its own transaction, as signals enqueues them with the writes they
  // follow (one transaction of all 267 made the workers wait ~10 s for its commit). Progress is read
  // from the task's remaining jobs: a count(*) of search.items every 200 ms read the growing table
  // each time (~1.5 s of PostgreSQL's CPU per 100,000 rows, taken from the indexing it measured).
  if (present !== items.length) {
    for (let k = 0; k * BATCH < items.length; k++) {
      await enqueueMany(pool, [{ task: SEARCH_INDEX_TASK, payload: { items: items.slice(k * BATCH, (k + 1) * BATCH) }, priority: SEARCH_INDEX_PRIORITY }]);
    }
    for (;;) {
      const { rows: [jobs] } = await pool.query<{ left: number; error: string | null }>(
        `SELECT count(*)::int AS left, max(j.last_error) AS error FROM graphile_worker._private_jobs j
           JOIN graphile_worker._private_tasks t ON t.id = j.task_id WHERE t.identifier = $1`, [SEARCH_INDEX_TASK]);
      if (jobs.error) throw new Error(`indexing failed: ${jobs.error}`);
      if (jobs.left === 0) break;
      await sleep(200);
    }
    const { rows: [{ n }] } = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM search.items');
    if (n !== items.length) throw new Error(`indexing ended with ${n} rows in search.items, not ${items.length}`);
  }
  const indexingSeconds = (performance.now() - indexingStarted) / 1000;
  await pool.query('VACUUM ANALYZE search.items');
  await pool.query('VACUUM ANALYZE search.item_locations');
  if (present !== items.length) log(`indexed ${items.length} items with ${provider.name} (${provider.version.model_id}) through the search-index-items task in ${round(indexingSeconds)} s (${Math.round(items.length / indexingSeconds)} items/s)`);
  if (present !== items.length) results.indexing = { items: items.length, provider: provider.name, model: provider.version, seconds: round(indexingSeconds), items_per_s: Math.round(items.length / indexingSeconds) };

  // 2. Storage.
  const { rows: [sizes] } = await pool.query<{ table: string; indexes: string; locations: string; n: number }>(
    `SELECT pg_table_size('search.items')::text AS table, pg_indexes_size('search.items')::text AS indexes,
            pg_total_relation_size('search.item_locations')::text AS locations, (SELECT count(*)::int FROM search.items) AS n`);
  const perItem = (bytes: string) => Math.round(Number(bytes) / sizes.n);
  results.storage = {
    items_table_bytes_per_item: perItem(sizes.table), items_indexes_bytes_per_item: perItem(sizes.indexes),
    item_locations_bytes_per_item: perItem(sizes.locations), items_table_mb: round(Number(sizes.table) / 2 ** 20),
    items_indexes_mb: round(Number(sizes.indexes) / 2 ** 20),
  };
  log(`search.items: ${perItem(sizes.table)} B/item (table with TOAST), ${perItem(sizes.indexes)} B/item in its indexes; item_locations ${perItem(sizes.locations)} B/item`);

  // 3. The search and signals services as their own processes; the index built from empty.
  const searchPort = await freePort();
  const signalsPort = await freePort();
  const searchUrl = `http://127.0.0.1:${searchPort}`;
  const signalsUrl = `http://127.0.0.1:${signalsPort}`;
  const searchDir = path.join(dir, 'search');
  if (!KEEP_INDEX) await rm(searchDir, { recursive: true, force: true });
  const serviceEnv = { ...baseEnv, HOST: '127.0.0.1', SEARCH_PORT: String(searchPort), SIGNALS_PORT: String(signalsPort), SEARCH_URL: searchUrl, SIGNALS_URL: signalsUrl };
  const started = performance.now();
  const search = serve('search', { ...serviceEnv, DATA_DIR: searchDir });
  children.push(search);
  children.push(serve('signals', { ...serviceEnv, DATA_DIR: path.join(dir, 'signals') }));
  let status = (await ready(searchUrl)).checks.vector_backend;
  while (status.state !== 'ready') {
    if (status.state === 'failed') throw new Error('the vector index failed to build');
    await sleep(500);
    status = (await ready(searchUrl)).checks.vector_backend;
  }
  const buildSeconds = (performance.now() - started) / 1000;
  // usearch: its file; pgvector: the graph's HNSW index in PostgreSQL.
  const size = status.backend === 'usearch' ? status.size : (await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM search.items WHERE lifecycle_status = 'live'`)).rows[0].n;
  const fileBytes = status.backend === 'usearch' ? (await stat(status.file)).size : (await pool.query<{ b: number }>(
    `SELECT coalesce(sum(pg_relation_size(c.oid)), 0)::float8 AS b FROM pg_class c WHERE c.relname LIKE 'items_embedding_hnsw_%' AND c.relkind = 'i'`)).rows[0].b;
  await ready(signalsUrl);
  log(`vector index (${status.backend}) of ${size} vectors built from empty in ${status.build_seconds} s (${round(buildSeconds)} s from process start); ${status.backend === 'usearch' ? 'file' : 'HNSW index'} ${round(fileBytes / 2 ** 20)} MB (${Math.round(fileBytes / size)} B/item)`);
  results.vector_index = {
    backend: status.backend, size, build_seconds: status.build_seconds, ready_after_start_seconds: round(buildSeconds),
    [status.backend === 'usearch' ? 'file_mb' : 'index_mb']: round(fileBytes / 2 ** 20), [status.backend === 'usearch' ? 'file_bytes_per_item' : 'index_bytes_per_item']: Math.round(fileBytes / size),
  };

  // 4. Latency over HTTP, with the CPU time each request costs the services and PostgreSQL.
  const signalsChild = children[1];
  cpuProbe = async () => {
    // An external server whose data directory this machine cannot read: its CPU is not measured.
    const pg = db.dataDir ? await Promise.all((await postgresPids(db.dataDir)).map((pid, n) => processCpuMs(pid, n === 0))) : [NaN];
    return { search: await processCpuMs(search.pid!), signals: await processCpuMs(signalsChild.pid!), postgres: pg.reduce((a, b) => a + b, 0) };
  };
  const searchKey = (await createApiKey(pool, 'search', 'bench')).key;
  const signalsKey = (await createApiKey(pool, 'signals', 'bench')).key;
  const post = async (url: string, key: string, payload: unknown) => {
    const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': key }, body: JSON.stringify(payload) });
    const json = await res.json() as any;
    if (res.status !== 200) throw new Error(`${url} answered ${res.status}: ${JSON.stringify(json)}`);
    return json;
  };
  const runSearch = async (payload: unknown): Promise<Answer> => {
    const { meta } = (await post(`${searchUrl}/v1/search`, searchKey, payload)).message;
    return { total: meta.total, estimated: meta.total_estimated === true };
  };
  const kinds = intents(items, QUERIES);
  const latencies: Record<string, { sequential: Latency; concurrent: Latency }> = {};
  const report = (kind: string, s: Latency, c: Latency) => log(`${kind.padEnd(9)} 1 at a time p50 ${String(s.p50_ms).padStart(6)} p95 ${String(s.p95_ms).padStart(6)} p99 ${String(s.p99_ms).padStart(6)} ms `
    + `(CPU/request: search ${s.cpu_ms_per_request?.search} ms, signals ${s.cpu_ms_per_request?.signals} ms, PostgreSQL ${s.cpu_ms_per_request?.postgres} ms) | `
    + `${CONCURRENCY} at a time p50 ${String(c.p50_ms).padStart(6)} p95 ${String(c.p95_ms).padStart(6)} p99 ${String(c.p99_ms).padStart(6)} ms | mean total ${s.mean_total} (${s.estimated_totals}/${s.n} estimated${s.native_fallbacks + c.native_fallbacks ? `, ${s.native_fallbacks + c.native_fallbacks} native fallbacks` : ''})`);
  for (const [kind, queries] of Object.entries(kinds)) {
    if (!STEPS.has(kind)) continue;
    const request = (i: number) => runSearch(searchBody(queries[i % queries.length], i));
    const sequential = await measure(queries.length, 1, request);
    const concurrent = await measure(CONCURRENT_REQUESTS, CONCURRENCY, request);
    latencies[kind] = { sequential, concurrent };
    report(kind, sequential, concurrent);
  }
  if (STEPS.has('discover')) {
    const request = async (i: number): Promise<Answer> => {
      const { meta } = await post(`${signalsUrl}/api/v1/network/item/discover`, signalsKey, discoverBody(TEXTS[i % TEXTS.length], i));
      return { total: meta.total, estimated: false, fallback: meta.source !== 'signals_search' };
    };
    const sequential = await measure(QUERIES, 1, request);
    const concurrent = await measure(CONCURRENT_REQUESTS, CONCURRENCY, request);
    latencies.discover = { sequential, concurrent };
    report('discover', sequential, concurrent);
  }
  results.queries = { via: 'POST /v1/search and POST /api/v1/network/item/discover over HTTP, separate service processes', limit: 20, latencies };

  // 5. recall@20 against brute force over every vector.
  if (STEPS.has('recall')) {
  const dims = provider.version.dimensions;
  const texts = items.map((i) => searchText(domain, i.item_state));
  const matrix = new Float32Array(items.length * dims);
  for (let k = 0; k < items.length; k += 5000) {
    // As stored (binary16), then unit length: the exact ranking is by the cosine of the stored
    // vectors, as the service scores.
    (await provider.embed(texts.slice(k, k + 5000))).forEach((v, n) => {
      const stored = roundToHalf(v);
      const norm = Math.hypot(...stored) || 1;
      matrix.set(stored.map((x) => x / norm), (k + n) * dims);
    });
  }
  // Brute force over every vector (usearch's exact search, native), then the 20 best of its 60 by
  // their cosine computed here.
  const exactTop = (q: Float32Array, exclude: number): number[] => {
    const { keys } = exactSearch(matrix, q, dims, 60, MetricKind.Cos, 0) as { keys: BigUint64Array };
    const scores: number[] = [];
    for (const key of keys) {
      const r = Number(key);
      if (r === exclude) continue;
      let s = 0;
      for (let d = 0, o = r * dims; d < dims; d++) s += matrix[o + d] * q[d];
      scores.push(s);
    }
    return scores.sort((a, b) => b - a).slice(0, 20);
  };
  let hits = 0;
  let asked = 0;
  for (let i = 0; i < RECALL_QUERIES; i++) {
    const anchor = i % 2 === 1;
    const row = (i * 7919 + 13) % items.length;
    const text = TEXTS[(i >> 1) % TEXTS.length];
    const q = anchor ? matrix.subarray(row * dims, (row + 1) * dims) : (await provider.embed([text]))[0];
    const top = exactTop(q, anchor ? row : -1);
    const threshold = top[19] - 1e-5;
    const intent = anchor ? { item: { id: items[row].item_id } } : { textSearch: text };
    const { items: found } = (await post(`${searchUrl}/v1/search`, searchKey, searchBody(intent, 1))).message;
    // Text queries rank their matches; an item of the exact top 20 under the threshold is not a match.
    const wanted = anchor ? 20 : top.filter((s) => s >= provider.textThreshold).length;
    hits += Math.min(wanted, found.filter((f: { score: number }) => f.score >= threshold).length);
    asked += wanted;
  }
  const recall = hits / asked;
  log(`recall@20 ${round(recall, 4)} over ${RECALL_QUERIES} queries (${RECALL_QUERIES / 2} texts, ${RECALL_QUERIES / 2} anchors)`);
  results.recall_at_20 = { recall: round(recall, 4), queries: RECALL_QUERIES };
  }

  // 6. Catch-up delay: an item re-indexed with the state of another whose text is unique (the real
  //    indexer), until the search service ranks it first for that other item as anchor: its new
  //    vector is identical, and only the vector index can find it.
  if (STEPS.has('catchup')) {
  const texts = items.map((i) => searchText(domain, i.item_state));
  const textCount = new Map<string, number>();
  for (const t of texts) textCount.set(t, (textCount.get(t) ?? 0) + 1);
  const delays: number[] = [];
  for (let i = 0; i < 5; i++) {
    const x = (i * 104729 + 7) % items.length;
    let y = (x + 50_000) % items.length;
    while (textCount.get(texts[y]) !== 1) y = (y + 1) % items.length;
    const changed = { ...items[x], item_state: items[y].item_state, updated_at: new Date(Date.now() + i).toISOString() };
    const written = performance.now();
    await indexSnapshots(platform.ctx, provider, [changed]);
    for (;;) {
      const { items: found } = (await post(`${searchUrl}/v1/search`, searchKey, searchBody({ item: { id: items[y].item_id } }, 1))).message;
      if (found[0]?.item_id === items[x].item_id) break;
      if (performance.now() - written > 30_000) throw new Error('the change never reached the vector index');
      await sleep(20);
    }
    delays.push(performance.now() - written);
  }
  delays.sort((a, b) => a - b);
  log(`catch-up delay: median ${Math.round(delays[2])} ms, max ${Math.round(delays[4])} ms (5 changes)`);
  results.catch_up_ms = { median: Math.round(delays[2]), max: Math.round(delays[4]) };
  }

  // 7. Memory of the search process.
  const rss = await rssMb(search.pid!);
  log(`search process RSS ${rss.now} MB (peak ${rss.peak} MB)`);
  results.search_process_rss_mb = rss;

  await platform.stop();
  results.load_average_end = loadAverage();
  if (ALL_STEPS.every((s) => STEPS.has(s)) && results.indexing) {
    await mkdir(path.dirname(RESULTS), { recursive: true });
    await writeFile(RESULTS, `${JSON.stringify(results, null, 2)}\n`);
    log(`wrote ${path.relative(repo, RESULTS)} (load average ${loadAverage().join(' ')})`);
  } else log(`not all steps ran: ${path.relative(repo, RESULTS)} left as it was (load average ${loadAverage().join(' ')})`);
} finally {
  for (const child of children) await stop(child);
  await db.stop();
  if (!KEEP_DIR) await rm(dir, { recursive: true, force: true });
}

