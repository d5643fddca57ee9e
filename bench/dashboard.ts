/**
 * Dashboard benchmark (`npm run bench:dashboard`): GET /v1/dashboard latency for an aggregator
 * holding the 266,978 real PMGSY facilities (../shared/data/pmgsy-rural-facilities), on a fresh
 * embedded database, through HTTP, with the worker in this process.
 *
 * - Loading: the file is read with bench/pmgsy-facilities.ts, each row validated against the
 *   provider schema and stored with `insertParticipants` (what a bulk chunk does: identity
 *   encrypted, go-live status) in batches of 5,000, under one completed bulk-upload record. Not
 *   through the bulk HTTP path: the dashboard reads only the aggregator's tables, and the pushes to
 *   signals and search indexing would keep the machine busy during the measurement
 *   (`npm run bench:bulk` measures onboarding).
 * - Measured: the rollup computation (the refresh task's work), cached reads (first page, both
 *   domains, limit 50), one domain at limit 200, a lifecycle filter, a cursor walk, a deep page
 *   number, refresh=true (enqueue + worker + compute + read), and the plans of the page queries.
 *
 * Environment: BENCH_ROWS (first N records only), BENCH_REQUESTS (cached reads, default 500).
 * Prints the figures and writes bench/results/dashboard.json.
 */
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createAggregator } from '../lib/aggregator/aggregators.ts';
import { createBulkUpload } from '../lib/aggregator/bulk/upload-jobs.ts';
import { computeDashboard, participantPageQuery } from '../lib/aggregator/dashboard.ts';
import { bulkParticipantId, insertParticipants, type NewParticipant } from '../lib/aggregator/participants.ts';
import { goLiveStatus } from '../lib/network/config.ts';
import { loadConfig } from '../lib/platform/config.ts';
import { withTransaction } from '../lib/platform/db.ts';
import { startEmbeddedPostgres } from '../lib/platform/embedded-postgres.ts';
import { freePort } from '../lib/platform/free-port.ts';
import { createLogger } from '../lib/platform/logger.ts';
import { startPlatform } from '../bin/platform.ts';
import { facilityItems } from './pmgsy-facilities.ts';

const repo = fileURLToPath(new URL('..', import.meta.url));
const SOURCE = path.resolve(repo, '../shared/data/pmgsy-rural-facilities/pmgsy_facilities_south_west_india.csv');
const RESULTS = path.join(repo, 'bench/results/dashboard.json');
const BATCH = 5000;

interface Latency { requests: number; p50_ms: number; p95_ms: number; p99_ms: number; max_ms: number }

function latency(samples: number[]): Latency {
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (q: number) => Number(sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)].toFixed(2));
  return { requests: samples.length, p50_ms: at(0.5), p95_ms: at(0.95), p99_ms: at(0.99), max_ms: at(1) };
}

async function main(): Promise<void> {
  if (!existsSync(SOURCE)) {
    process.stderr.write(`bench:dashboard needs ${SOURCE} (the shared PMGSY data next to the repository)\n`);
    process.exit(2);
  }
  const limit = process.env.BENCH_ROWS ? Number(process.env.BENCH_ROWS) : Infinity;
  const requests = Number(process.env.BENCH_REQUESTS ?? 500);
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'ldp-bench-dashboard-'));
  const loadStart = os.loadavg();
  const pgPort = await freePort();
  const db = await startEmbeddedPostgres({ dataDir, port: pgPort });
  const config = loadConfig({
    ...process.env, LOG_LEVEL: 'warn', DATA_DIR: dataDir, DATABASE_URL: db.url, HOST: '127.0.0.1', EMBEDDED_POSTGRES_PORT: String(pgPort), WORKER_METRICS_PORT: '0',
    SIGNALS_PORT: '0', AGGREGATOR_PORT: '0', SEARCH_PORT: '0', EMBEDDING_PROVIDER: 'hashing',
  });
  const platform = await startPlatform(config, createLogger('warn'), db.url, { services: ['signals', 'aggregator'], worker: true });
  const { ctx } = platform;
  const results: Record<string, unknown> = {
    measured_at: new Date().toISOString(),
    machine: { cpus: os.cpus().length, model: os.cpus()[0]?.model, memory_gb: Math.round(os.totalmem() / 1e9) },
    load_average_at_start: loadStart.map((l) => Number(l.toFixed(2))),
    source: path.relative(repo, SOURCE),
  };
  try {
    const provider = ctx.network.domains.get('provider')!;
    const agg = await withTransaction(ctx.pool, (c) => createAggregator(c, ctx.network, { name: `Bench dashboard ${Date.now()}`, types: ['provider'] }));
    const scope = { aggregatorId: agg.aggregator_id, orgId: agg.org_id, domain: provider };
    const upload = await createBulkUpload(ctx.pool, {
      uploadId: crypto.randomUUID(), aggregatorId: agg.aggregator_id, orgId: agg.org_id, domain: provider, createdBy: 'bench',
      fileName: path.basename(SOURCE), format: 'csv', sizeBytes: 0, fileObjectKey: 'bench/none', columnMap: null,
    });

    // Load the real rows.
    process.stderr.write(`loading ${SOURCE}…\n`);
    const loadStarted = Date.now();
    let rows = 0;
    let invalid = 0;
    let stored = 0;
    let batch: NewParticipant[] = [];
    const flush = async () => {
      const b = batch;
      batch = [];
      stored += (await withTransaction(ctx.pool, (c) => insertParticipants(c, ctx.pii, scope, b))).size;
    };
    for await (const item of facilityItems(SOURCE, ctx.network, provider, (n) => bulkParticipantId(upload.upload_id, n + 2))) {
      if (rows >= limit) break;
      rows++;
      const state = item.item_state as Record<string, unknown>;
      if (!provider.validate(state)) {
        invalid++;
        continue;
      }
      batch.push({
        participantId: item.item_id,
        participant: { profile: state, identity: { name: state.name as string }, externalId: state.external_id as string, locations: item.item_locations ?? [] },
        keys: { externalId: state.external_id as string },
        lifecycleStatus: goLiveStatus(provider, state),
        bulkUploadId: upload.upload_id,
        rowNumber: rows + 1,
      });
      if (batch.length >= BATCH) await flush();
    }
    await flush();
    await ctx.pool.query(
      `UPDATE aggregator.bulk_uploads SET status = 'completed', total_rows = $2, passed = $3, failed = $4, skipped = $5, completed_at = now() WHERE upload_id = $1`,
      [upload.upload_id, rows, stored, invalid, rows - invalid - stored]);
    // What autovacuum does after a bulk load: statistics, and the visibility map index-only scans use.
    await ctx.pool.query('VACUUM (ANALYZE) aggregator.participants');
    results.loaded = { rows, participants: stored, invalid, skipped_duplicates: rows - invalid - stored, seconds: (Date.now() - loadStarted) / 1000 };
    process.stderr.write(`loaded ${stored} participants in ${((Date.now() - loadStarted) / 1000).toFixed(1)} s\n`);

    // The rollup computation (the refresh task's work).
    const computeMs: number[] = [];
    for (let i = 0; i < 5; i++) {
      const t = performance.now();
      await computeDashboard(ctx.pool, ctx.network, agg.aggregator_id);
      computeMs.push(performance.now() - t);
    }
    results.rollup_compute = { runs: computeMs.map((m) => Number(m.toFixed(1))), median_ms: Number([...computeMs].sort((a, b) => a - b)[2].toFixed(1)) };

    const token = await ctx.tokens.issue({ sub: 'bench', aggregator_id: agg.aggregator_id, org_id: agg.org_id, aggregator_type: ['provider'], roles: ['admin'] }, 3600);
    const base = `${ctx.urls.aggregator}/v1/dashboard`;
    const get = async (query: string) => {
      const t = performance.now();
      const res = await fetch(`${base}?${query}`, { headers: { authorization: `Bearer ${token}` } });
      const body = await res.json() as { by_domain: { total_matching: number; participants: unknown[]; next_cursor: string | null }[]; metadata: { refreshed: boolean } };
      const ms = performance.now() - t;
      if (res.status !== 200) throw new Error(`GET /v1/dashboard?${query} answered ${res.status}: ${JSON.stringify(body)}`);
      return { ms, body };
    };
    const series = async (n: number, query: string) => {
      const samples: number[] = [];
      for (let i = 0; i < n; i++) samples.push((await get(query)).ms);
      return latency(samples);
    };
    for (let i = 0; i < 20; i++) await get('limit=50'); // warm-up
    const first = await get('limit=50');
    const provSlice = first.body.by_domain.find((d) => d.total_matching > 0)!;
    results.dashboard_total_matching = provSlice.total_matching;
    process.stderr.write('measuring reads…\n');
    results.cached_first_page_limit_50 = await series(requests, 'limit=50');
    results.cached_provider_limit_200 = await series(Math.ceil(requests / 2), 'domain=provider&limit=200');
    results.cached_lifecycle_live_limit_50 = await series(Math.ceil(requests / 2), 'lifecycle=live&limit=50');
    // A walk of 200 consecutive pages by cursor.
    const walk: number[] = [];
    let cursor: string | null = null;
    for (let i = 0; i < 200; i++) {
      const { ms, body }: { ms: number; body: { by_domain: { next_cursor: string | null }[] } } = await get(`domain=provider&limit=200${cursor ? `&cursor=${cursor}` : ''}`);
      walk.push(ms);
      cursor = body.by_domain[0].next_cursor;
      if (!cursor) break;
    }
    results.cursor_walk_limit_200 = latency(walk);
    const deepPage = Math.max(1, Math.floor((provSlice.total_matching - 1) / 200));
    results.page_number_deep = { page: deepPage, limit: 200, ...await series(20, `domain=provider&limit=200&page=${deepPage}`) };
    const refresh: number[] = [];
    for (let i = 0; i < 5; i++) {
      const { ms, body } = await get('limit=50&refresh=true');
      if (!body.metadata.refreshed) throw new Error('refresh=true did not recompute within DASHBOARD_REFRESH_WAIT_MS');
      refresh.push(ms);
    }
    results.refresh_true = latency(refresh);

    // The plans of the page queries, as the dashboard runs them.
    const plan = async (query: { text: string; values: unknown[] }) => {
      const { rows: lines } = await ctx.pool.query<{ 'QUERY PLAN': string }>({ text: `EXPLAIN (ANALYZE, BUFFERS) ${query.text}`, values: query.values });
      const text = lines.map((l) => l['QUERY PLAN']);
      return {
        indexes: [...new Set([...text.join('\n').matchAll(/(Index(?: Only)? Scan) using (\w+)/g)].map((m) => `${m[1]}: ${m[2]}`))],
        seq_scan: /Seq Scan/.test(text.join('\n')), sort: /Sort/.test(text.join('\n')), execution: text.find((l) => l.startsWith('Execution Time')),
      };
    };
    const { rows: [mid] } = await ctx.pool.query(
      `SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS created_at, participant_id FROM aggregator.participants
        WHERE aggregator_id = $1 ORDER BY created_at DESC, participant_id DESC OFFSET $2 LIMIT 1`, [agg.aggregator_id, Math.floor(stored / 2)]);
    const page = { aggregatorId: agg.aggregator_id, domain: 'provider', offset: 0, limit: 200 };
    results.plans = {
      keyset_page_mid: await plan(participantPageQuery({ ...page, cursor: { domain: 'provider', createdAt: mid.created_at, participantId: mid.participant_id } })),
      status_first_page: await plan(participantPageQuery({ ...page, status: 'live', limit: 50 })),
      status_keyset_page_mid: await plan(participantPageQuery({ ...page, status: 'live', cursor: { domain: 'provider', createdAt: mid.created_at, participantId: mid.participant_id } })),
      page_number_deep: await plan(participantPageQuery({ ...page, offset: Math.max(0, stored - 200) })),
      status_page_number_deep: await plan(participantPageQuery({ ...page, status: 'live', offset: Math.max(0, stored - 1000) })),
    };
  } finally {
    results.load_average_at_end = os.loadavg().map((l) => Number(l.toFixed(2)));
    await platform.stop();
    await db.stop();
    await rm(dataDir, { recursive: true, force: true });
  }
  const resultsFile = Number.isFinite(limit) ? RESULTS.replace(/\.json$/, `-${limit}-rows.json.tmp`) : RESULTS;
  await mkdir(path.dirname(resultsFile), { recursive: true });
  await writeFile(resultsFile, `${JSON.stringify(results, null, 2)}\n`);
  process.stdout.write(`${JSON.stringify(results, null, 2)}\n`);
  const cached = results.cached_first_page_limit_50 as Latency;
  process.stdout.write(`\nGET /v1/dashboard for ${(results.loaded as { participants: number }).participants} participants: p95 ${cached.p95_ms} ms (p50 ${cached.p50_ms} ms) from the stored rollup; `
    + `rollup computed in ${(results.rollup_compute as { median_ms: number }).median_ms} ms (median); refresh=true p95 ${(results.refresh_true as Latency).p95_ms} ms; `
    + `load average ${(results.load_average_at_start as number[]).join(' ')}; written to ${path.relative(repo, resultsFile)}\n`);
}

await main();
