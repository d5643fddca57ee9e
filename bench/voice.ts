/**
 * Voice-campaign benchmark (`npm run bench:voice`): a 100,000-item voice job dispatched by a real
 * worker to the local provider (callbacks on), while the job's status is polled at 500 requests/s.
 *
 * Every part runs in its own process, as in production: embedded PostgreSQL, the aggregator
 * service (`ldp serve --service aggregator`), the worker (`ldp worker`, so its peak RSS is its
 * own), the provider (`ldp voice-provider`); this process seeds the participants, creates the job
 * over HTTP and runs the load generator (bench/poll-load.ts, its own process: loadtest, open loop,
 * one request every 1/rate s whatever the answers do) against `GET /v1/campaign/voice/{job_id}`.
 *
 * Figures: create → all items final (seconds, items/s), the create request alone, worker peak RSS
 * (VmHWM), CPU seconds per process, poll latency p50/p95/p99 at BENCH_POLL_RATE req/s for
 * BENCH_POLL_SECONDS s while the job runs and for BENCH_POLL_AFTER_SECONDS (10) once it has
 * settled with the service's and PostgreSQL's CPU milliseconds per poll then, the load average. Environment: BENCH_ITEMS (default 100000), BENCH_POLL_RATE (500), BENCH_POLL_SECONDS
 * (30), BENCH_FAILURE_RATE (0.02), VOICE_CHUNK_ITEMS, VOICE_PROVIDER_BATCH_SIZE, WORKER_CONCURRENCY;
 * BENCH_PROFILE_DIR runs the aggregator service under `node --cpu-prof` writing its profile there;
 * BENCH_PG_STATEMENTS=1 adds PostgreSQL's costliest statements until all items are final.
 * Prints the figures and writes bench/results/voice.json.
 */
import { randomUUID } from 'node:crypto';
import { spawn, type ChildProcess } from 'node:child_process';
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createAggregator } from '../lib/aggregator/aggregators.ts';
import { insertParticipants } from '../lib/aggregator/participants.ts';
import { createContext } from '../lib/context.ts';
import { loadConfig } from '../lib/platform/config.ts';
import { withTransaction } from '../lib/platform/db.ts';
import { startEmbeddedPostgres } from '../lib/platform/embedded-postgres.ts';
import { freePort } from '../lib/platform/free-port.ts';
import { createLogger } from '../lib/platform/logger.ts';
import { migrate } from '../lib/platform/migrate.ts';
import { cpuSeconds, postgresCpuSeconds } from './cpu.ts';
import { resetStatements, topStatements, withStatementStats } from './pg-statements.ts';

const repo = fileURLToPath(new URL('..', import.meta.url));
const RESULTS = path.join(repo, 'bench/results/voice.json');
const ITEMS = Number(process.env.BENCH_ITEMS ?? 100_000);
const POLL_RATE = Number(process.env.BENCH_POLL_RATE ?? 500);
const POLL_SECONDS = Number(process.env.BENCH_POLL_SECONDS ?? 30);
const FAILURE_RATE = process.env.BENCH_FAILURE_RATE ?? '0.02';
const POLL_AFTER_SECONDS = Number(process.env.BENCH_POLL_AFTER_SECONDS ?? 10);
/** When set, the aggregator service runs under `node --cpu-prof` and writes its profile there on exit. */
const PROFILE_DIR = process.env.BENCH_PROFILE_DIR;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Starts `ldp ...args`; resolves once its stdout matches `ready`. */
function ldp(args: string[], env: NodeJS.ProcessEnv, ready: RegExp, nodeArgs: string[] = []): Promise<{ child: ChildProcess; match: RegExpExecArray }> {
  const child = spawn(process.execPath, [...nodeArgs, path.join(repo, 'bin/ldp.js'), ...args], { cwd: repo, env, stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (d) => {
      out += d;
      const match = ready.exec(out);
      if (match) resolve({ child, match });
    });
    child.once('exit', (code) => reject(new Error(`ldp ${args.join(' ')} exited with ${code}`)));
  });
}

async function stop(child: ChildProcess | undefined): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  await exited;
}

async function rssMb(pid: number): Promise<{ now: number; peak: number }> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const kb = (name: string) => Number(new RegExp(`${name}:\\s+(\\d+) kB`).exec(status)![1]);
  return { now: kb('VmRSS') / 1024, peak: kb('VmHWM') / 1024 };
}


type PollResult = { target_rate: number; seconds: number; requests: number; rate_achieved: number; non_2xx: number; errors: number; latency_ms: Record<string, number> };

/**
 * Starts the load generator (bench/poll-load.ts, a process of its own: loadtest's constant rate, an
 * open loop), so that this process's own work never delays the load; autocannon, used before,
 * limits its rate per connection and per second (bursts, not a rate: docs/decisions.md, "Voice
 * campaigns"). It warms up for 2 s on `warmupUrl` (its start and JIT are not the service's
 * latency), then `poll(url)` polls `url` at POLL_RATE requests/s for `seconds`. It shares the
 * cores with the platform on equal terms (nice 0).
 */
async function startPoller(warmupUrl: string, headers: Record<string, string>, seconds: number): Promise<{ poll(url: string): Promise<PollResult> }> {
  const child = spawn(process.execPath, ['--import', 'tsx', path.join(repo, 'bench/poll-load.ts'), JSON.stringify({ headers, rate: POLL_RATE, seconds, warmup: { url: warmupUrl, seconds: 2 } })],
    { cwd: repo, stdio: ['pipe', 'pipe', 'inherit'] });
  let out = '';
  child.stdout!.on('data', (chunk: Buffer) => { out += chunk.toString(); });
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
  for (;;) {
    if (out.startsWith('warm\n')) break;
    if (child.exitCode !== null) throw new Error(`bench/poll-load.ts exited with ${child.exitCode}`);
    await sleep(20);
  }
  return {
    async poll(url) {
      child.stdin!.end(`${url}\n`);
      const code = await exited;
      if (code !== 0) throw new Error(`bench/poll-load.ts exited with ${code}`);
      return JSON.parse(out.slice('warm\n'.length)) as PollResult;
    },
  };
}

/**
 * What the aggregator's own `/metrics` says of the polls so far: how many answered within each
 * `http_request_duration_seconds` bound (from the request's arrival to its response, so the time
 * spent waiting for the process to be scheduled or in the network is not in it), and its event
 * loop's largest delay since the last scrape (prom-client resets it on every scrape).
 */
async function serviceSideOfPolls(base: string): Promise<{ within: Record<string, number>; eventLoopLagMaxMs: number }> {
  const text = await (await fetch(`${base}/metrics`)).text();
  const within: Record<string, number> = {};
  for (const m of text.matchAll(/^http_request_duration_seconds_bucket\{([^}]*)\} (\d+)$/gm)) {
    if (!m[1].includes('route="/v1/campaign/voice/:job_id"') || !m[1].includes('method="GET"')) continue;
    const le = /le="([^"]+)"/.exec(m[1])![1];
    within[le] = (within[le] ?? 0) + Number(m[2]);
  }
  const lag = /^nodejs_eventloop_lag_max_seconds(?:\{[^}]*\})? ([\d.e+-]+)$/m.exec(text);
  return { within, eventLoopLagMaxMs: lag ? Math.round(Number(lag[1]) * 1000) : NaN };
}

/** The service-side figures of the polls between two `serviceSideOfPolls` readings: answers, share within 50 ms, and the share per bound. */
function serviceSideBetween(before: { within: Record<string, number> }, after: { within: Record<string, number>; eventLoopLagMaxMs: number }) {
  const counts = Object.fromEntries(Object.entries(after.within).map(([le, n]) => [le, n - (before.within[le] ?? 0)]));
  const total = counts['+Inf'] ?? 0;
  return {
    answers: total,
    share_within_ms: Object.fromEntries(Object.entries(counts).filter(([le]) => le !== '+Inf').map(([le, n]) => [Number(le) * 1000, Number((n / total).toFixed(4))])),
    event_loop_lag_max_ms: after.eventLoopLagMaxMs,
  };
}

async function main(): Promise<void> {
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'ldp-bench-voice-'));
  await chmod(dataDir, 0o755);
  const loadStart = os.loadavg();
  const pgPort = await freePort();
  const db = await withStatementStats(await startEmbeddedPostgres({ dataDir, port: pgPort }), dataDir);
  const aggregatorPort = await freePort();
  const providerPort = await freePort();
  const env: NodeJS.ProcessEnv = {
    ...process.env, LOG_LEVEL: 'warn', DATA_DIR: dataDir, DATABASE_URL: db.url, HOST: '127.0.0.1', EMBEDDED_POSTGRES_PORT: String(pgPort), WORKER_METRICS_PORT: '0',
    AGGREGATOR_PORT: String(aggregatorPort), AGGREGATOR_PUBLIC_URL: `http://127.0.0.1:${aggregatorPort}`, EMBEDDING_PROVIDER: 'hashing',
    VOICE_PROVIDER_URL: `http://127.0.0.1:${providerPort}`, VOICE_PROVIDER_SECRET: `bench-${randomUUID()}`,
  };
  const config = loadConfig(env);
  const ctx = await createContext(config, db.url, createLogger('warn'));
  const children: ChildProcess[] = [];
  try {
    await migrate(ctx.pool);
    const agg = await withTransaction(ctx.pool, (client) => createAggregator(client, ctx.network, { name: 'Voice bench', types: ['seeker'] }));
    const token = await ctx.tokens.issue({
      sub: 'bench:voice', aggregator_id: agg.aggregator_id, org_id: agg.org_id, aggregator_type: agg.types, roles: ['operator'],
    }, 3600);

    process.stderr.write(`seeding ${ITEMS} seekers…\n`);
    const domain = ctx.network.domains.get('seeker')!;
    const ids: string[] = [];
    for (let first = 0; first < ITEMS; first += 5000) {
      const people = Array.from({ length: Math.min(5000, ITEMS - first) }, (_, i) => {
        const phone = `+919${String(first + i).padStart(9, '0')}`;
        const identity = { name: `Seeker ${first + i}`, phone };
        const participantId = randomUUID();
        ids.push(participantId);
        return { participantId, participant: { profile: { ...identity }, identity, locations: [] }, keys: { phoneIndex: ctx.pii.blindIndex('phone', phone) } };
      });
      await withTransaction(ctx.pool, (client) => insertParticipants(client, ctx.pii, { aggregatorId: agg.aggregator_id, orgId: agg.org_id, domain }, people));
    }
    await ctx.pool.query('VACUUM ANALYZE aggregator.participants');

    const logFile = path.join(dataDir, 'provider.log');
    const provider = await ldp(['voice-provider', '--port', String(providerPort), '--failure-rate', FAILURE_RATE, '--log', logFile], env, /listening on/);
    children.push(provider.child);
    const service = await ldp(['serve', '--service', 'aggregator'], env, /aggregator\s+(\S+)/, PROFILE_DIR ? ['--cpu-prof', `--cpu-prof-dir=${PROFILE_DIR}`] : []);
    children.push(service.child);
    const base = service.match[1];
    const worker = spawn(process.execPath, [path.join(repo, 'bin/ldp.js'), 'worker'], { cwd: repo, env, stdio: ['ignore', 'ignore', 'inherit'] });
    children.push(worker);
    for (let waited = 0; ; waited += 100) {
      const { rowCount } = await ctx.pool.query('SELECT 1 FROM platform.worker_heartbeats WHERE pid = $1', [worker.pid]);
      if (rowCount) break;
      if (waited > 60_000) throw new Error('the worker did not start within a minute');
      await sleep(100);
    }
    const auth = { authorization: `Bearer ${token}` };

    process.stderr.write(`creating the job (${ITEMS} items) and polling it at ${POLL_RATE} req/s for ${POLL_SECONDS} s…\n`);
    const cpuOf = async () => ({
      worker: (await cpuSeconds(worker.pid!)).own, service: (await cpuSeconds(service.child.pid!)).own,
      provider: (await cpuSeconds(provider.child.pid!)).own, postgres: await postgresCpuSeconds(db.dataDir), bench: process.cpuUsage().user / 1e6,
    });
    const poller = await startPoller(`${base}/health`, auth, POLL_SECONDS);
    await resetStatements(ctx.pool);
    const cpuBefore = await cpuOf();
    const started = Date.now();
    const created = await fetch(`${base}/v1/campaign/voice`, {
      method: 'POST', headers: { ...auth, 'content-type': 'application/json', 'idempotency-key': randomUUID() },
      body: JSON.stringify({ item_ids: ids, content: { script: 'The job fair is on Saturday at the district office.' } }),
    });
    if (created.status !== 202) throw new Error(`create answered ${created.status}: ${await created.text()}`);
    const createSeconds = (Date.now() - started) / 1000;
    const { job_id: jobId } = await created.json() as { job_id: string };

    const sideBefore = await serviceSideOfPolls(base);
    const pollStarted = Date.now();
    const polling = poller.poll(`${base}/v1/campaign/voice/${jobId}`);
    /** The job's progress each second of the poll, to read beside the poll's timeline. */
    const progress: { second: number; pending: number; resolved: number; submitted: number; final: number }[] = [];
    let rssSampled = 0;
    let finalAt = 0;
    let lastReport = 0;
    for (;;) {
      rssSampled = Math.max(rssSampled, (await rssMb(worker.pid!)).now);
      const { rows: [c] } = await ctx.pool.query('SELECT pending, resolved, submitted, sent, failed, total FROM aggregator.voice_jobs WHERE job_id = $1', [jobId]);
      const second = Math.floor((Date.now() - pollStarted) / 1000);
      if (second > (progress.at(-1)?.second ?? -1)) progress.push({ second, pending: c.pending, resolved: c.resolved, submitted: c.submitted, final: c.total - c.pending - c.resolved - c.submitted });
      if (c.pending + c.resolved + c.submitted === 0) {
        finalAt = Date.now();
        break;
      }
      if (Date.now() - lastReport > 5000) {
        lastReport = Date.now();
        process.stderr.write(`  ${((Date.now() - started) / 1000).toFixed(0)} s: pending ${c.pending}, resolved ${c.resolved}, submitted ${c.submitted}, sent ${c.sent}, failed ${c.failed}\n`);
      }
      if (Date.now() - started > 15 * 60_000) throw new Error('the job did not end within 15 minutes');
      await sleep(50);
    }
    const workerPeak = (await rssMb(worker.pid!)).peak;
    const statements = await topStatements(ctx.pool, 15);
    const cpuAfter = await cpuOf();
    const cpu = Object.fromEntries(Object.entries(cpuAfter).map(([k, v]) => [k, Number((v - cpuBefore[k as keyof typeof cpuBefore]).toFixed(1))]));
    const during = { ...await polling, service_side: serviceSideBetween(sideBefore, await serviceSideOfPolls(base)) };
    // The same poll once the job has settled: what the poll path costs without the dispatch beside it.
    // Its CPU per request (the service's and PostgreSQL's, from /proc) is the figure that holds on a
    // machine shared with other work, where latencies do not.
    const settledCpuBefore = { service: (await cpuSeconds(service.child.pid!)).own, postgres: await postgresCpuSeconds(db.dataDir) };
    const settledPoll = await (await startPoller(`${base}/health`, auth, POLL_AFTER_SECONDS)).poll(`${base}/v1/campaign/voice/${jobId}`);
    const perRequestMs = (before: number, after: number) => Number(((after - before) * 1000 / settledPoll.requests).toFixed(3));
    const settled = {
      ...settledPoll,
      cpu_ms_per_request: {
        service: perRequestMs(settledCpuBefore.service, (await cpuSeconds(service.child.pid!)).own),
        postgres: perRequestMs(settledCpuBefore.postgres, await postgresCpuSeconds(db.dataDir)),
      },
    };
    const loadEnd = os.loadavg();
    const { rows: [job] } = await ctx.pool.query('SELECT * FROM aggregator.voice_jobs WHERE job_id = $1', [jobId]);
    const log = (await readFile(logFile, 'utf8')).split('\n').filter(Boolean).map((l) => JSON.parse(l));
    const keys = log.filter((e) => e.event === 'call').map((e) => e.idempotency_key);
    const seconds = (finalAt - started) / 1000;
    const results = {
      measured_at: new Date().toISOString(),
      machine: { cpus: os.cpus().length, model: os.cpus()[0]?.model, memory_gb: Math.round(os.totalmem() / 1e9) },
      load_average: { at_start: loadStart.map((l) => Number(l.toFixed(2))), at_end: loadEnd.map((l) => Number(l.toFixed(2))) },
      items: ITEMS, chunk_items: config.VOICE_CHUNK_ITEMS, batch_size: config.VOICE_PROVIDER_BATCH_SIZE, worker_concurrency: config.WORKER_CONCURRENCY,
      provider_failure_rate: Number(FAILURE_RATE),
      create_request_seconds: Number(createSeconds.toFixed(2)),
      create_to_all_final_seconds: Number(seconds.toFixed(2)),
      items_per_second: Math.round(ITEMS / seconds),
      worker_peak_rss_mb: Math.round(workerPeak),
      worker_rss_sampled_max_mb: Math.round(rssSampled),
      /** CPU seconds each process used from create to all items final (bench: this process, the load generator). */
      cpu_seconds_until_final: cpu,
      counts: { sent: job.sent, failed: job.failed, skipped_not_owned: job.skipped_not_owned, skipped_no_contact: job.skipped_no_contact, duplicate_active: job.duplicate_active },
      provider_calls: keys.length, provider_distinct_keys: new Set(keys).size,
      poll_while_dispatching: { ...during, overlapped_dispatch_seconds: Number(Math.min(seconds - createSeconds, POLL_SECONDS).toFixed(1)), job_progress: progress },
      poll_after_settled: settled,
      /** BENCH_PG_STATEMENTS=1: PostgreSQL's costliest statements from create to all items final. */
      postgres_statements_until_final: statements,
      targets: { items_per_second: 5000, poll_p99_ms: 50 },
    };
    await writeFile(RESULTS, `${JSON.stringify(results, null, 2)}\n`);
    process.stdout.write(`${JSON.stringify(results, null, 2)}\n`);
  } finally {
    for (const child of children.reverse()) await stop(child);
    await ctx.close();
    await db.stop();
    await rm(dataDir, { recursive: true, force: true });
  }
}

await main();
