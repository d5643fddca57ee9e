/**
 * Bulk onboarding benchmark (`npm run bench:bulk`): the 266,978-row PMGSY facility file (in
 * `../shared/data`) onboarded as providers through the HTTP API, end to end, on a fresh embedded
 * database with its own DATA_DIR and ports.
 *
 * - Two modes, each with a fresh child process and a fresh database per run:
 *   - `worker`: the signals and aggregator services run in this process and the worker alone as
 *     `ldp worker` in a child process, so that its peak RSS (VmHWM) is its own;
 *   - `start`: everything in one `ldp start` child process (services, and the worker in its
 *     thread), as an operator runs it; its RSS is the whole process.
 * - Rows/s end to end: from the start of the upload request to the job's `completed_at`
 *   (upload, staging, coercion, encryption, participant inserts, signals pushes).
 * - The floor: PostgreSQL's own `COPY` of the same file into a plain table (server-side COPY).
 * - XLSX: the same file converted by LibreOffice (`soffice --headless`) when installed, else
 *   written by exceljs's streaming writer (every cell a string, as the CSV has them).
 *
 * Each run (the COPY floor, each mode, the XLSX run) gets a fresh embedded database, so none pays
 * for what an earlier run left: its items in every index, its search indexing still queued, the
 * vector index `ldp start`'s search service would build from them at start, autovacuum.
 *
 * - `upsert` (issue 30): on one fresh database, the file is onboarded (create), then uploaded
 *   again over itself in mode upsert with 1 % of its rows changed (the locality of every 100th
 *   row), then with every row changed; each with a fresh `ldp worker`.
 *
 * Environment: BENCH_ROWS (first N records only, for a quick run), BENCH_XLSX=0 (skip the XLSX
 * run), BENCH_MODES (default `worker,start,upsert`), BENCH_WORKER_CONCURRENCY (default WORKER_CONCURRENCY), BULK_UPLOAD_CHUNK_ROWS,
 * BENCH_CPU_PROF=dir (a CPU profile of the worker), BENCH_PG_STATEMENTS=1 (PostgreSQL's costliest
 * statements of each run, from pg_stat_statements, nested ones included; its WAL by record type and
 * full-page images by relation, from pg_walinspect), BENCH_REPORT_MS (progress line interval),
 * BENCH_PG_SETTINGS (name=value,… set on each fresh embedded server before the run, e.g. max_wal_size=4GB),
 * BENCH_UPSERT_REPEAT=n (mode upsert: n runs with 1 % changed, alternately changed and changed back, instead of 1 % and all).
 * Prints the figures and writes bench/results/bulk-upload.json.
 *
 * The server path (issue 31): with BENCH_DATABASE_URL (an external PostgreSQL, e.g. with pgvector;
 * bench/bench-database.ts) each run gets a fresh database on that server instead of a fresh
 * embedded cluster, and the results go to bench/results/bulk-upload-server.json (the COPY floor
 * needs a server that can read this machine's files; BENCH_PG_STATEMENTS is for embedded runs).
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { createReadStream, createWriteStream, existsSync, openAsBlob } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { parse } from 'csv-parse';
import ExcelJS from 'exceljs';
import pg from 'pg';
import { stringify } from 'csv-stringify';
import { createAggregator } from '../lib/aggregator/aggregators.ts';
import type { BulkUploadJson } from '../lib/aggregator/bulk/upload-jobs.ts';
import { SEARCH_INDEX_TASK } from '../lib/network/items.ts';
import { loadConfig } from '../lib/platform/config.ts';
import { withTransaction } from '../lib/platform/db.ts';
import type { EmbeddedPostgres } from '../lib/platform/embedded-postgres.ts';
import { createLogger } from '../lib/platform/logger.ts';
import { startPlatform, type PlatformHandle } from '../bin/platform.ts';
import { WORKER_NODE_OPTIONS } from '../workers/runner.ts';
import { freePort } from '../lib/platform/free-port.ts';
import { cpuSeconds, postgresCpuSeconds } from './cpu.ts';
import { PG_STATEMENTS, resetStatements, topStatements, withStatementStats, type StatementCost } from './pg-statements.ts';
import { benchDatabase, databaseFacts, resultsFor, SERVER_URL } from './bench-database.ts';

const run = promisify(execFile);
const repo = fileURLToPath(new URL('..', import.meta.url));
const SOURCE = path.resolve(repo, '../shared/data/pmgsy-rural-facilities/pmgsy_facilities_south_west_india.csv');
const COLUMN_MAP = path.join(repo, 'fixtures/column-maps/pmgsy-facilities.json');
const RESULTS = resultsFor(path.join(repo, 'bench/results/bulk-upload.json'));


/** Writes the first `limit` records of the source (quoted newlines kept) to `target`. */
async function firstRecords(limit: number, target: string): Promise<void> {
  let n = 0;
  const records = async function* () {
    for await (const record of createReadStream(SOURCE).pipe(parse({ relax_column_count: true })) as AsyncIterable<string[]>) {
      if (n++ > limit) return;
      yield record;
    }
  };
  await pipeline(Readable.from(records()), stringify({ record_delimiter: 'windows' }), createWriteStream(target));
}


/** Resident set size now (VmRSS) and at its peak so far (VmHWM) of a live process, in MB. */
async function rssMb(pid: number): Promise<{ now: number; peak: number }> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const kb = (name: string) => Number(new RegExp(`${name}:\\s+(\\d+) kB`).exec(status)![1]);
  return { now: kb('VmRSS') / 1024, peak: kb('VmHWM') / 1024 };
}

type Mode = 'worker' | 'start' | 'upsert';

function startWorker(env: NodeJS.ProcessEnv, mode: Mode): ChildProcess {
  // BENCH_CPU_PROF=dir: a V8 CPU profile of the worker (node --cpu-prof), for finding hot spots.
  const prof = process.env.BENCH_CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_CPU_PROF}`] : [];
  const command = mode === 'start' ? 'start' : 'worker';
  // `ldp worker` as docker-compose.yml starts it (workers/runner.ts WORKER_NODE_OPTIONS); `ldp start` with node's defaults.
  const options = mode === 'start' ? [] : WORKER_NODE_OPTIONS.split(' ');
  const child = spawn(process.execPath, [...prof, ...options, path.join(repo, 'bin/ldp.js'), command], { cwd: repo, env, stdio: ['ignore', 'ignore', 'inherit'] });
  child.on('exit', (code, signal) => {
    if (code !== 0 && signal !== 'SIGTERM') process.stderr.write(`worker exited with ${code ?? signal}\n`);
  });
  return child;
}

async function stopWorker(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  await exited;
}

interface RunResult {
  mode: Mode;
  file: string;
  format: string;
  rows: number;
  bytes: number;
  upload_seconds: number;
  /** Start to staged (file read, header matched, rows staged in chunks). */
  staging_seconds: number;
  /** Staged to completed (chunks coerced, stored, pushed; error report). */
  onboarding_seconds: number;
  end_to_end_seconds: number;
  rows_per_second: number;
  /** The worker's VmHWM when the job completed (mode `start`: the whole `ldp start` process). */
  worker_peak_rss_mb: number;
  /** Largest VmRSS seen while polling the job (every 200 ms). */
  worker_rss_sampled_max_mb: number;
  /**
   * CPU used from the upload request to `completed` by the worker, the services (this process) and
   * PostgreSQL: what the run costs, whatever the load (also per 1,000 rows).
   */
  cpu_seconds: CpuUsed;
  /** The same until the search indexing the run queued has drained. */
  cpu_seconds_with_search_indexing: CpuUsed;
  /** PostgreSQL's WAL from the upload request to `completed`. */
  wal: WalWritten;
  /** BENCH_PG_STATEMENTS=1: PostgreSQL's costliest statements up to `completed`, then up to the drained search indexing. */
  postgres_statements?: StatementCost[];
  postgres_statements_with_search_indexing?: StatementCost[];
  /** BENCH_PG_STATEMENTS=1: CPU of automatic vacuums and analyzes per table since the server started (all runs so far). */
  autovacuum_cpu_seconds?: Record<string, number>;
  autovacuum_cpu_seconds_with_search_indexing?: Record<string, number>;
  /** BENCH_PG_STATEMENTS=1: the run's WAL up to `completed` by record type, and its full-page images by relation (pg_walinspect). */
  wal_records?: Awaited<ReturnType<typeof walRecords>>;
  job: Pick<BulkUploadJson, 'status' | 'status_reason' | 'total_rows' | 'passed' | 'failed' | 'skipped' | 'mode' | 'created' | 'updated' | 'unchanged'>;
  accounted: boolean;
  /** Time after `completed` until the worker's queue was empty (search indexing of the items). */
  search_indexing_after_completion_seconds: number;
}

/** PostgreSQL's write-ahead log up to `completed`: bytes, full-page images, requested checkpoints. */
interface WalWritten { mb: number; full_page_images: number; checkpoints: number }

/** WAL of one record type or relation (pg_walinspect): records (or blocks), MB, full-page images and their MB. */
interface WalRecords { what: string; count: number; mb: number; fpi?: number; fpi_mb: number }

/**
 * BENCH_PG_STATEMENTS=1: the WAL written between two LSNs by record type (`pg_get_wal_stats`), and
 * its full-page images by relation (`pg_get_wal_block_info`); the largest 15 of each.
 */
async function walRecords(pool: PlatformHandle['ctx']['pool'], from: string, to: string): Promise<{ by_record_type: WalRecords[]; fpi_by_relation: WalRecords[] } | undefined> {
  if (!PG_STATEMENTS || SERVER_URL) return undefined;
  await pool.query('CREATE EXTENSION IF NOT EXISTS pg_walinspect');
  const { rows: byType } = await pool.query<WalRecords>(
    `SELECT "resource_manager/record_type" AS what, count::int, round(combined_size::numeric / 1048576, 1)::float8 AS mb,
            round(fpi_size::numeric / 1048576, 1)::float8 AS fpi_mb
       FROM pg_get_wal_stats($1::pg_lsn, $2::pg_lsn, true) ORDER BY combined_size DESC LIMIT 15`, [from, to]);
  const { rows: byRelation } = await pool.query<WalRecords>(
    `SELECT coalesce(c.oid::regclass::text, b.relfilenode::text) || ' ' || b.relforknumber AS what, count(*)::int AS count,
            round(sum(b.block_data_length + coalesce(b.block_fpi_length, 0))::numeric / 1048576, 1)::float8 AS mb,
            count(*) FILTER (WHERE b.block_fpi_length > 0)::int AS fpi, round(sum(coalesce(b.block_fpi_length, 0))::numeric / 1048576, 1)::float8 AS fpi_mb
       FROM pg_get_wal_block_info($1::pg_lsn, $2::pg_lsn, false) b LEFT JOIN pg_class c ON c.relfilenode = b.relfilenode
      GROUP BY 1 ORDER BY 4 DESC, 3 DESC LIMIT 15`, [from, to]);
  return { by_record_type: byType, fpi_by_relation: byRelation };
}

const currentLsn = async (pool: PlatformHandle['ctx']['pool']) => (await pool.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn')).rows[0].lsn;

/** WAL counters so far (pg_stat_wal; checkpoints from pg_stat_checkpointer in PostgreSQL 17, pg_stat_bgwriter before). */
async function walWritten(pool: PlatformHandle['ctx']['pool']): Promise<WalWritten> {
  const { rows: [{ v }] } = await pool.query<{ v: number }>(`SELECT current_setting('server_version_num')::int AS v`);
  const checkpoints = v >= 170000 ? 'SELECT (num_timed + num_requested)::int FROM pg_stat_checkpointer'
    : 'SELECT (checkpoints_timed + checkpoints_req)::int FROM pg_stat_bgwriter';
  const { rows: [w] } = await pool.query<WalWritten>(
    `SELECT wal_bytes::float8 / 1048576 AS mb, wal_fpi::int8::int AS full_page_images, (${checkpoints}) AS checkpoints FROM pg_stat_wal`);
  return w;
}

function walSince(before: WalWritten, now: WalWritten): WalWritten {
  return { mb: Math.round(now.mb - before.mb), full_page_images: now.full_page_images - before.full_page_images, checkpoints: now.checkpoints - before.checkpoints };
}

interface CpuUsed { worker: number; services: number; postgres: number; total: number; per_1000_rows: number | null }

/**
 * BENCH_PG_STATEMENTS=1: CPU seconds of PostgreSQL's automatic vacuums and analyzes per table and
 * kind, from its log (`log_autovacuum_min_duration = 0`: each run logs its "system usage").
 */
async function autovacuumCpu(clusterDir: string): Promise<Record<string, number> | undefined> {
  if (!PG_STATEMENTS) return undefined;
  const log = await readFile(path.join(clusterDir, 'server.log'), 'utf8').catch(() => '');
  const used: Record<string, number> = {};
  const entry = /automatic (vacuum|analyze) of table "([^"]+)"[\s\S]*?CPU: user: ([\d.]+) s, system: ([\d.]+) s/g;
  for (const m of log.matchAll(entry)) {
    const key = `${m[1]} ${m[2]}`;
    used[key] = Number(((used[key] ?? 0) + Number(m[3]) + Number(m[4])).toFixed(2));
  }
  return Object.fromEntries(Object.entries(used).sort((a, b) => b[1] - a[1]));
}


/** The aggregator an upload is made as. */
type BenchAggregator = Awaited<ReturnType<typeof createAggregator>>;

/**
 * Uploads `file` through HTTP (as `options.aggregator`, else a fresh aggregator; in
 * `options.uploadMode`, else create), starts it and waits for it, with a fresh worker (or `ldp start`).
 */
async function onboard(platform: PlatformHandle, workerEnv: NodeJS.ProcessEnv, clusterDir: string, file: string, label: string, mode: Mode,
  options: { aggregator?: BenchAggregator; uploadMode?: string } = {}): Promise<RunResult & { aggregator: BenchAggregator }> {
  const { ctx } = platform;
  const agg = options.aggregator
    ?? await withTransaction(ctx.pool, (client) => createAggregator(client, ctx.network, { name: `Bench ${label} ${Date.now()}`, types: ['provider'] }));
  const token = await ctx.tokens.issue({
    sub: `bench:${agg.aggregator_id}`, aggregator_id: agg.aggregator_id, org_id: agg.org_id, aggregator_type: agg.types, roles: ['operator'],
  }, 3600);
  let base = ctx.urls.aggregator;
  let env = workerEnv;
  if (mode === 'start') {
    // Its own ports; the same database, DATA_DIR and keys.
    const ports = { SIGNALS_PORT: String(await freePort()), AGGREGATOR_PORT: String(await freePort()), SEARCH_PORT: String(await freePort()) };
    const { SIGNALS_URL: _s, AGGREGATOR_PUBLIC_URL: _a, ...rest } = workerEnv;
    env = { ...rest, ...ports };
    base = `http://127.0.0.1:${ports.AGGREGATOR_PORT}`;
  }
  const auth = { authorization: `Bearer ${token}` };
  const worker = startWorker(env, mode);
  try {
    // Measure from a running worker, not from its start-up.
    for (let waited = 0; ; waited += 100) {
      const { rowCount } = await ctx.pool.query('SELECT 1 FROM platform.worker_heartbeats WHERE pid = $1', [worker.pid]);
      const listening = mode === 'worker' || await fetch(`${base}/health`).then((r) => r.ok, () => false);
      if (rowCount && listening) break;
      if (waited > 120_000) throw new Error('the worker did not start within two minutes');
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const form = new FormData();
    form.set('participant_type', 'provider');
    form.set('column_map', await readFile(COLUMN_MAP, 'utf8'));
    if (options.uploadMode) form.set('mode', options.uploadMode);
    form.set('file', await openAsBlob(file), path.basename(file));
    const started = Date.now();
    await resetStatements(ctx.pool);
    const walBefore = await walWritten(ctx.pool);
    const lsnBefore = await currentLsn(ctx.pool);
    const cpuBefore = { services: process.cpuUsage(), postgres: await postgresCpuSeconds(clusterDir), worker: (await cpuSeconds(worker.pid!)).own };
    /** CPU seconds used since `before` by the worker, the services (this process) and PostgreSQL, and per 1,000 rows once known. */
    const cpuSince = async (before: typeof cpuBefore) => {
      const services = process.cpuUsage(before.services);
      const used = {
        worker: (await cpuSeconds(worker.pid!)).own - before.worker,
        services: (services.user + services.system) / 1e6,
        postgres: (await postgresCpuSeconds(clusterDir)) - before.postgres,
      };
      const total = used.worker + used.services + used.postgres;
      return {
        worker: Number(used.worker.toFixed(1)), services: Number(used.services.toFixed(1)), postgres: Number(used.postgres.toFixed(1)),
        total: Number(total.toFixed(1)), per_1000_rows: job?.total_rows ? Number((total / job.total_rows * 1000).toFixed(3)) : null,
      };
    };
    const created = await fetch(`${base}/v1/bulk-uploads`, { method: 'POST', headers: auth, body: form });
    if (created.status !== 201) throw new Error(`upload answered ${created.status}: ${await created.text()}`);
    const uploadSeconds = (Date.now() - started) / 1000;
    const { upload_id: id } = await created.json() as BulkUploadJson;
    const start = await fetch(`${base}/v1/bulk-uploads/${id}/start`, {
      method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify({ attestation: true }),
    });
    if (start.status !== 200) throw new Error(`start answered ${start.status}: ${await start.text()}`);
    let job: BulkUploadJson | undefined;
    let lastReport = 0;
    let rssSampled = 0;
    for (;;) {
      const rssNow = (await rssMb(worker.pid!)).now;
      rssSampled = Math.max(rssSampled, rssNow);
      job = await (await fetch(`${base}/v1/bulk-uploads/${id}`, { headers: auth })).json() as BulkUploadJson;
      if (job.status === 'completed' || job.status === 'failed') break;
      if (Date.now() - lastReport > Number(process.env.BENCH_REPORT_MS ?? 5000)) {
        lastReport = Date.now();
        process.stderr.write(`  ${label} (${mode}): ${job.status}, ${job.passed + job.failed + job.skipped}/${job.total_rows ?? '?'} rows after ${((Date.now() - started) / 1000).toFixed(0)} s, worker RSS ${Math.round(rssNow)} MB\n`);
      }
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    // VmHWM also covers the worker's start (migrations, imports) and anything it did after the job.
    const rss = (await rssMb(worker.pid!)).peak;
    const cpuAtCompletion = await cpuSince(cpuBefore);
    const walAtCompletion = walSince(walBefore, await walWritten(ctx.pool));
    const walRecordsAtCompletion = await walRecords(ctx.pool, lsnBefore, await currentLsn(ctx.pool));
    const statementsAtCompletion = await topStatements(ctx.pool);
    const autovacuumAtCompletion = await autovacuumCpu(clusterDir);
    // Search indexing of the pushed items may still be queued: drained before the next run, so
    // that it does not slow that one down (and reported: it is not part of the end-to-end time).
    const drainStart = Date.now();
    for (;;) {
      const { rows: [queued] } = await ctx.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM graphile_worker.jobs WHERE task_identifier = '${SEARCH_INDEX_TASK}'`);
      if (queued.n === 0) break;
      await new Promise((resolve) => setTimeout(resolve, 500));
    }
    const drainSeconds = (Date.now() - drainStart) / 1000;
    const cpu = await cpuSince(cpuBefore);
    const { rows: [phases] } = await ctx.pool.query<{ staging: number; onboarding: number }>(
      `SELECT extract(epoch FROM staged_at - started_at)::float8 AS staging, extract(epoch FROM completed_at - staged_at)::float8 AS onboarding
         FROM aggregator.bulk_uploads WHERE upload_id = $1`, [id]);
    const seconds = (Date.parse(job.completed_at!) - started) / 1000;
    const rows = job.total_rows ?? 0;
    return {
      mode, file: path.basename(file), format: job.file_format, rows, bytes: (await stat(file)).size,
      upload_seconds: uploadSeconds, staging_seconds: Number(phases.staging.toFixed(2)), onboarding_seconds: Number(phases.onboarding.toFixed(2)),
      end_to_end_seconds: seconds, rows_per_second: Math.round(rows / seconds),
      worker_peak_rss_mb: Math.round(rss), worker_rss_sampled_max_mb: Math.round(rssSampled),
      cpu_seconds: cpuAtCompletion,
      cpu_seconds_with_search_indexing: cpu,
      wal: walAtCompletion,
      ...(statementsAtCompletion ? {
        postgres_statements: statementsAtCompletion, postgres_statements_with_search_indexing: await topStatements(ctx.pool),
        autovacuum_cpu_seconds: autovacuumAtCompletion, autovacuum_cpu_seconds_with_search_indexing: await autovacuumCpu(clusterDir),
        wal_records: walRecordsAtCompletion,
      } : {}),
      accounted: job.passed + job.failed + job.skipped === rows,
      search_indexing_after_completion_seconds: Number(drainSeconds.toFixed(1)),
      job: {
        status: job.status, status_reason: job.status_reason, total_rows: job.total_rows, passed: job.passed, failed: job.failed, skipped: job.skipped,
        mode: job.mode, created: job.created, updated: job.updated, unchanged: job.unchanged,
      },
      aggregator: agg,
    };
  } finally {
    await stopWorker(worker);
  }
}

/**
 * A copy of `source` (CSV, header first) at `target` with the locality (`habitation_name`) of every
 * `every`-th data row changed: the file of a list uploaded again with some rows corrected.
 */
async function changedCopy(source: string, target: string, every: number): Promise<number> {
  let changed = 0;
  let index = 0;
  const records = async function* () {
    for await (const record of createReadStream(source).pipe(parse({ relax_column_count: true })) as AsyncIterable<string[]>) {
      if (index > 0 && index % every === 0 && record.length > 4) {
        record[4] = `${record[4]} East`;
        changed++;
      }
      index++;
      yield record;
    }
  };
  await pipeline(Readable.from(records()), stringify({ record_delimiter: 'windows' }), createWriteStream(target));
  return changed;
}

/**
 * The upsert runs (issue 30) on one fresh platform: `file` onboarded (create), then uploaded again
 * in mode upsert with 1 % of its rows changed, then with all of them changed.
 */
async function upsertRuns(fresh: Fresh, file: string, filesDir: string): Promise<Record<string, unknown>> {
  const { platform, workerEnv, db } = fresh;
  process.stderr.write(`upsert: onboarding ${file} first (create)\n`);
  const base = await onboard(platform, workerEnv, db.dataDir, file, 'upsert-base', 'upsert');
  const runs: Record<string, unknown> = { base_create: { ...base, aggregator: undefined } };
  // BENCH_UPSERT_REPEAT=n: the 1 % run n times instead — the changed copy, then the original file
  // (which changes the same rows back), and so on — for several 1 % figures from one onboarding.
  const repeat = Number(process.env.BENCH_UPSERT_REPEAT ?? 0);
  const plan: [name: string, every: number, back: boolean][] = repeat > 0
    ? Array.from({ length: repeat }, (_, i) => [i ? `one_percent_changed_${i + 1}` : 'one_percent_changed', 100, i % 2 === 1])
    : [['one_percent_changed', 100, false], ['all_changed', 1, false]];
  let changed = 0;
  for (const [name, every, back] of plan) {
    // Back: the original file, which changes back the rows the run before changed.
    const changedFile = back ? file : path.join(filesDir, `${name}.csv`);
    if (!back) changed = await changedCopy(file, changedFile, every);
    process.stderr.write(`upsert (${name}): ${changed} rows changed\n`);
    const run = await onboard(platform, workerEnv, db.dataDir, changedFile, `upsert-${name}`, 'upsert', { aggregator: base.aggregator, uploadMode: 'upsert' });
    runs[name] = { ...run, aggregator: undefined, rows_changed: changed };
  }
  return runs;
}

/** Server-side COPY of `file` into a plain table: the floor of any onboarding. */
async function copyFloor(platform: PlatformHandle, file: string): Promise<{ seconds: number; rows: number }> {
  const { pool } = platform.ctx;
  await pool.query(`CREATE TABLE public.bench_copy_floor (facility_id text, name text, category text, habitation_id text, habitation_name text,
    block_id text, block_name text, district_id text, district_name text, state_id text, state_name text, latitude text, longitude text)`);
  const started = process.hrtime.bigint();
  const { rowCount } = await pool.query(`COPY public.bench_copy_floor FROM '${file.replaceAll("'", "''")}' WITH (FORMAT csv, HEADER true)`);
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  await pool.query('DROP TABLE public.bench_copy_floor');
  return { seconds, rows: rowCount ?? 0 };
}

/** `csv` as a one-sheet workbook through exceljs's streaming writer (constant memory). */
async function writeXlsx(csv: string, target: string): Promise<void> {
  const workbook = new ExcelJS.stream.xlsx.WorkbookWriter({ filename: target, useSharedStrings: false, useStyles: false });
  const sheet = workbook.addWorksheet('Sheet1');
  for await (const record of createReadStream(csv).pipe(parse({ relax_column_count: true, bom: true })) as AsyncIterable<string[]>) {
    sheet.addRow(record).commit();
  }
  sheet.commit();
  await workbook.commit();
}

async function soffice(): Promise<string | null> {
  for (const bin of ['soffice', 'libreoffice']) {
    try {
      await run('which', [bin]);
      return bin;
    } catch { /* not installed */ }
  }
  return null;
}

interface Fresh { db: EmbeddedPostgres; platform: PlatformHandle; config: ReturnType<typeof loadConfig>; workerEnv: NodeJS.ProcessEnv; stop(): Promise<void> }

/**
 * A fresh embedded database (own cluster, DATA_DIR and ports) with the signals and aggregator
 * services in this process: each run gets one, so no run pays for what an earlier one left (its
 * items in every index, search indexing still queued, autovacuum of its rows).
 */
async function freshPlatform(): Promise<Fresh> {
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'ldp-bench-bulk-'));
  // The embedded server (running as the postgres user when root) must reach the files it COPYs.
  await import('node:fs/promises').then((fs) => fs.chmod(dataDir, 0o755));
  const db = SERVER_URL ? await benchDatabase({ dataDir, label: 'bulk' }) : await withStatementStats(await benchDatabase({ dataDir, label: 'bulk' }), dataDir);
  await applyPgSettings(db.url);
  const pgPort = db.port;
  const env = {
    LOG_LEVEL: 'warn', DATA_DIR: dataDir, DATABASE_URL: db.url, HOST: '127.0.0.1',
    SIGNALS_PORT: String(await freePort()), AGGREGATOR_PORT: String(await freePort()), SEARCH_PORT: String(await freePort()),
    EMBEDDED_POSTGRES_PORT: String(pgPort), WORKER_METRICS_PORT: '0',
    // Search indexing (enqueued by signals for every pushed item) runs in the same worker once a
    // slot is free; the built-in provider keeps it offline and light (no model download).
    EMBEDDING_PROVIDER: process.env.EMBEDDING_PROVIDER ?? 'hashing',
  };
  const config = loadConfig({ ...process.env, ...env });
  const platform = await startPlatform(config, createLogger('warn'), db.url, { services: ['signals', 'aggregator'], worker: false });
  const workerEnv = {
    ...process.env, ...env,
    SIGNALS_URL: platform.ctx.urls.signals, AGGREGATOR_PUBLIC_URL: platform.ctx.urls.aggregator,
    WORKER_CONCURRENCY: process.env.BENCH_WORKER_CONCURRENCY ?? String(config.WORKER_CONCURRENCY),
  };
  return {
    db, platform, config, workerEnv,
    async stop() {
      await platform.stop();
      await db.stop();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

/**
 * BENCH_PG_SETTINGS=name=value,…: server settings a reload applies (e.g. max_wal_size=4GB),
 * set with ALTER SYSTEM on the run's fresh embedded server, to measure what they would change.
 */
async function applyPgSettings(url: string): Promise<void> {
  const settings = (process.env.BENCH_PG_SETTINGS ?? '').split(',').map((s) => s.trim()).filter(Boolean);
  if (!settings.length || SERVER_URL) return;
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    for (const setting of settings) {
      const [name, value] = setting.split('=');
      if (!/^[a-z_]+$/.test(name)) throw new Error(`BENCH_PG_SETTINGS: not a setting name: ${name}`);
      await client.query(`ALTER SYSTEM SET ${name} = ${client.escapeLiteral(value)}`);
    }
    await client.query('SELECT pg_reload_conf()');
  } finally {
    await client.end();
  }
}

/** Runs `fn` on a fresh platform, stopped afterwards. */
async function onFresh<T>(fn: (fresh: Fresh) => Promise<T>): Promise<T> {
  const fresh = await freshPlatform();
  try {
    return await fn(fresh);
  } finally {
    await fresh.stop();
  }
}

async function main(): Promise<void> {
  if (!existsSync(SOURCE)) {
    process.stderr.write(`bench:bulk needs ${SOURCE} (the shared PMGSY data next to the repository)\n`);
    process.exit(2);
  }
  const limit = process.env.BENCH_ROWS ? Number(process.env.BENCH_ROWS) : undefined;
  // Input files derived from the source (first N rows, XLSX), readable by the embedded servers.
  const filesDir = await mkdtemp(path.join(os.tmpdir(), 'ldp-bench-bulk-files-'));
  await import('node:fs/promises').then((fs) => fs.chmod(filesDir, 0o755));
  let file = SOURCE;
  if (limit) {
    file = path.join(filesDir, `first-${limit}.csv`);
    await firstRecords(limit, file);
  }
  const loadStart = os.loadavg();
  const config = loadConfig({ ...process.env, DATABASE_URL: 'postgres://unused', EMBEDDING_PROVIDER: 'hashing' });
  const results: Record<string, unknown> = {
    measured_at: new Date().toISOString(), machine: { cpus: os.cpus().length, model: os.cpus()[0]?.model, memory_gb: Math.round(os.totalmem() / 1e9) },
    load_average_at_start: loadStart.map((l) => Number(l.toFixed(2))), chunk_rows: config.BULK_UPLOAD_CHUNK_ROWS,
    worker_concurrency: Number(process.env.BENCH_WORKER_CONCURRENCY ?? config.WORKER_CONCURRENCY), source: path.relative(repo, file),
    runs: `each on a fresh ${SERVER_URL ? 'database of the server BENCH_DATABASE_URL names' : 'embedded database'}`,
  };
  const allModes = (process.env.BENCH_MODES ?? 'worker,start,upsert').split(',').map((m) => m.trim()) as Mode[];
  const modes = allModes.filter((m) => m !== 'upsert');
  // The XLSX run comes after the CSV runs: with the worker separate when measured.
  const xlsxMode: Mode = modes.includes('worker') ? 'worker' : modes[0];
  try {
    const floor = await onFresh(async ({ platform, db }) => {
      results.database = await databaseFacts(db.url);
      return copyFloor(platform, file);
    });
    results.copy_floor = { seconds: Number(floor.seconds.toFixed(2)), rows: floor.rows, rows_per_second: Math.round(floor.rows / floor.seconds) };
    const ratios: Record<string, number> = {};
    for (const mode of modes) {
      process.stderr.write(`CSV run (${mode}): ${file}\n`);
      const run = await onFresh(({ platform, workerEnv, db }) => onboard(platform, workerEnv, db.dataDir, file, 'csv', mode));
      results[mode === 'worker' ? 'csv' : `csv_${mode}`] = run;
      ratios[mode] = Number((run.end_to_end_seconds / floor.seconds).toFixed(1));
    }
    results.ratio_to_copy_floor = ratios;
    if (allModes.includes('upsert')) results.upsert = await onFresh((fresh) => upsertRuns(fresh, file, filesDir));

    const office = await soffice();
    if (process.env.BENCH_XLSX === '0') {
      results.xlsx = { skipped: 'BENCH_XLSX=0' };
    } else if (!office) {
      process.stderr.write('writing the XLSX with exceljs (LibreOffice is not installed)…\n');
      const convertStart = Date.now();
      const xlsx = path.join(filesDir, `${path.basename(file, '.csv')}.xlsx`);
      await writeXlsx(file, xlsx);
      const convertSeconds = (Date.now() - convertStart) / 1000;
      process.stderr.write(`XLSX run: ${xlsx}\n`);
      const run = await onFresh(({ platform, workerEnv, db }) => onboard(platform, workerEnv, db.dataDir, xlsx, 'xlsx', xlsxMode));
      results.xlsx = { ...run, written_by: 'exceljs', conversion_seconds: Math.round(convertSeconds) };
    } else {
      process.stderr.write('converting to XLSX with LibreOffice…\n');
      const convertStart = Date.now();
      const outDir = path.join(filesDir, 'xlsx');
      await mkdir(outDir, { recursive: true });
      await run(office, ['--headless', `-env:UserInstallation=file://${path.join(filesDir, 'lo-profile')}`, '--convert-to', 'xlsx', '--outdir', outDir, file], { timeout: 30 * 60_000 });
      const xlsx = path.join(outDir, `${path.basename(file, '.csv')}.xlsx`);
      const convertSeconds = (Date.now() - convertStart) / 1000;
      process.stderr.write(`XLSX run: ${xlsx}\n`);
      const xlsxRun = await onFresh(({ platform, workerEnv, db }) => onboard(platform, workerEnv, db.dataDir, xlsx, 'xlsx', xlsxMode));
      results.xlsx = { ...xlsxRun, libreoffice_conversion_seconds: Math.round(convertSeconds) };
    }
  } finally {
    results.load_average_at_end = os.loadavg().map((l) => Number(l.toFixed(2)));
    await rm(filesDir, { recursive: true, force: true });
  }
  // A reduced run (BENCH_ROWS) does not replace the full run's results.
  const resultsFile = limit ? RESULTS.replace(/\.json$/, `-${limit}-rows.json.tmp`) : RESULTS;
  await mkdir(path.dirname(resultsFile), { recursive: true });
  await writeFile(resultsFile, `${JSON.stringify(results, null, 2)}\n`);
  process.stdout.write(`${JSON.stringify(results, null, 2)}\n`);
  process.stdout.write('\n');
  for (const mode of modes) {
    const run = results[mode === 'worker' ? 'csv' : `csv_${mode}`] as RunResult;
    process.stdout.write(`CSV (${mode === 'worker' ? 'ldp worker separate' : 'ldp start, one process'}): ${run.rows} rows in ${run.end_to_end_seconds.toFixed(1)} s = `
      + `${run.rows_per_second} rows/s end to end (target ≥ 10000), peak RSS ${run.worker_peak_rss_mb} MB (target ≤ 256 for the worker); `
      + `ratio to COPY ${(results.ratio_to_copy_floor as Record<string, number>)[mode]}× (target ≤ 30)\n`);
  }
  const upsert = results.upsert as Record<string, RunResult & { rows_changed: number }> | undefined;
  for (const name of Object.keys(upsert ?? {}).filter((n) => n !== 'base_create')) {
    const run = upsert?.[name];
    if (!run) continue;
    process.stdout.write(`upsert, ${name.replaceAll('_', ' ')} (${run.rows_changed} rows; ldp worker separate): ${run.rows} rows in ${run.end_to_end_seconds.toFixed(1)} s = `
      + `${run.rows_per_second} rows/s end to end (target ${name === 'all_changed' ? '≥ the create run' : '≥ 20000'}), `
      + `${run.cpu_seconds.per_1000_rows} CPU-s per 1,000 rows, worker peak RSS ${run.worker_peak_rss_mb} MB (target ≤ 256); `
      + `${run.job.created} created, ${run.job.updated} updated, ${run.job.unchanged} unchanged\n`);
  }
  process.stdout.write(`COPY floor ${(results.copy_floor as { seconds: number }).seconds} s; load average ${results.load_average_at_start} at start, `
    + `${results.load_average_at_end} at end; written to ${path.relative(repo, resultsFile)}\n`);
}

await main();
