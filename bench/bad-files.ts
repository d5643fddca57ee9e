/**
 * The bad-file corpus through `ldp upload` (`npm run bench:bad-files`, issue 15): every file of
 * test/fixtures/bad-files/generate.ts is uploaded with the real CLI (`ldp upload FILE --type seeker
 * --attest --wait --errors-out …`) against the services running here, onboarded by `ldp worker` in a
 * child process, on a fresh embedded database with its own DATA_DIR.
 *
 * For each file it records what a person sees — the CLI's exit code and its last line (a refused
 * upload's shape C detail, a failed job's reason, or the summary), and the first reason of the
 * error report — and the worker's peak RSS while the file was processed (VmHWM, reset before each
 * file through /proc/PID/clear_refs). Alongside each bad file, a one-row good upload of another
 * aggregator must complete: the worker keeps serving other jobs. The worker's pid must not change
 * (no crash).
 *
 * Prints a table and writes bench/results/bad-files.json (with the load average).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile, mkdir } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createAggregator } from '../lib/aggregator/aggregators.ts';
import { loadConfig } from '../lib/platform/config.ts';
import { withTransaction } from '../lib/platform/db.ts';
import { startEmbeddedPostgres } from '../lib/platform/embedded-postgres.ts';
import { createLogger } from '../lib/platform/logger.ts';
import { freePort } from '../lib/platform/free-port.ts';
import { startPlatform } from '../bin/platform.ts';
import { generateBadFiles } from '../test/fixtures/bad-files/generate.ts';

const repo = fileURLToPath(new URL('..', import.meta.url));
const LDP = path.join(repo, 'bin/ldp.js');
const RESULTS = path.join(repo, 'bench/results/bad-files.json');
/** What a reason must never look like: the text of a JavaScript or system error (as in test/aggregator/bad-files.test.ts). */
const RUNTIME_TEXT = /Cannot read prop|undefined|TypeError|RangeError|is not a function|ENOENT|EMFILE|\.ts:\d+|\bat [\w.]+ \(/;

/** VmRSS and VmHWM of a live process, in MB. */
async function rssMb(pid: number): Promise<{ now: number; peak: number }> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const kb = (name: string) => Number(new RegExp(`${name}:\\s+(\\d+) kB`).exec(status)![1]);
  return { now: kb('VmRSS') / 1024, peak: kb('VmHWM') / 1024 };
}

function runCli(args: string[], env: NodeJS.ProcessEnv): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [LDP, ...args], { cwd: repo, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => { stdout += d; });
    child.stderr.on('data', (d) => { stderr += d; });
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/** A one-row upload of `token`'s aggregator, started; resolves with its final status. */
async function goodJob(base: string, token: string): Promise<string> {
  const auth = { authorization: `Bearer ${token}` };
  const form = new FormData();
  form.set('participant_type', 'seeker');
  form.set('file', new Blob(['name,phone,state\r\nMeera Pillai,9876501300,Kerala\r\n']), 'good.csv');
  const created = await fetch(`${base}/v1/bulk-uploads`, { method: 'POST', headers: auth, body: form });
  const { upload_id: id } = await created.json() as { upload_id: string };
  await fetch(`${base}/v1/bulk-uploads/${id}/start`, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: '{"attestation":true}' });
  for (let waited = 0; waited < 300_000; waited += 250) {
    const job = await (await fetch(`${base}/v1/bulk-uploads/${id}`, { headers: auth })).json() as { status: string };
    if (job.status === 'completed' || job.status === 'failed') return job.status;
    await new Promise((r) => setTimeout(r, 250));
  }
  return 'still running after 5 minutes';
}

const lastLine = (text: string) => text.trim().split('\n').filter(Boolean).at(-1) ?? '';

async function main(): Promise<void> {
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'ldp-bench-bad-files-'));
  const corpusDir = path.join(dataDir, 'corpus');
  await mkdir(corpusDir);
  const files = await generateBadFiles(corpusDir);
  const loadStart = os.loadavg();
  const pgPort = await freePort();
  const db = await startEmbeddedPostgres({ dataDir: path.join(dataDir, 'pg'), port: pgPort });
  const env = {
    LOG_LEVEL: 'warn', DATA_DIR: dataDir, DATABASE_URL: db.url, HOST: '127.0.0.1', EMBEDDED_POSTGRES_PORT: String(pgPort), WORKER_METRICS_PORT: '0',
    SIGNALS_PORT: String(await freePort()), AGGREGATOR_PORT: String(await freePort()), SEARCH_PORT: String(await freePort()),
    EMBEDDING_PROVIDER: 'hashing',
  };
  const config = loadConfig({ ...process.env, ...env });
  const platform = await startPlatform(config, createLogger('warn'), db.url, { services: ['signals', 'aggregator', 'search'], worker: false });
  const { ctx } = platform;
  const childEnv = { ...process.env, ...env, SIGNALS_URL: ctx.urls.signals, AGGREGATOR_PUBLIC_URL: ctx.urls.aggregator, SEARCH_URL: ctx.urls.search };
  const worker: ChildProcess = spawn(process.execPath, [LDP, 'worker'], { cwd: repo, env: childEnv, stdio: ['ignore', 'ignore', 'inherit'] });
  const rows: Record<string, unknown>[] = [];
  let workerStartRss = 0;
  try {
    for (let waited = 0; ; waited += 100) {
      const { rowCount } = await ctx.pool.query('SELECT 1 FROM platform.worker_heartbeats WHERE pid = $1', [worker.pid]);
      if (rowCount) break;
      if (waited > 120_000) throw new Error('the worker did not start within two minutes');
      await new Promise((r) => setTimeout(r, 100));
    }
    workerStartRss = (await rssMb(worker.pid!)).peak;
    const newAggregator = async (name: string) => {
      const agg = await withTransaction(ctx.pool, (c) => createAggregator(c, ctx.network, { name, types: ['seeker'] }));
      const token = await ctx.tokens.issue({ sub: `bench:${agg.aggregator_id}`, aggregator_id: agg.aggregator_id, org_id: agg.org_id, aggregator_type: agg.types, roles: ['operator'] }, 3600);
      return { id: agg.aggregator_id, token };
    };
    for (const f of files) {
      const agg = await newAggregator(`Bad files ${f.filename}`);
      const other = await newAggregator(`Good neighbour of ${f.filename}`);
      await writeFile(`/proc/${worker.pid}/clear_refs`, '5'); // resets VmHWM to the current RSS
      let sampled = 0;
      const sampler = setInterval(() => { rssMb(worker.pid!).then((r) => { sampled = Math.max(sampled, r.now); }, () => {}); }, 100);
      const started = Date.now();
      const errorsOut = path.join(dataDir, `${f.filename}.errors.csv`);
      const [cli, neighbour] = await Promise.all([
        runCli(['upload', f.file, '--type', 'seeker', '--attest', '--wait', '--errors-out', errorsOut, '--aggregator', agg.id, '--url', ctx.urls.aggregator], childEnv),
        goodJob(ctx.urls.aggregator, other.token),
      ]);
      clearInterval(sampler);
      const rss = await rssMb(worker.pid!);
      const report = await readFile(errorsOut, 'utf8').catch(() => '');
      const firstReason = report.replace(/^\uFEFF/, '').split('\r\n')[1] ?? '';
      // A completed job: its summary (and the empty-file line); else the CLI's error.
      const said = cli.code === 0 ? cli.stdout.split('\n').filter((l) => /^completed:|^the file has/.test(l)).join(' / ') : lastLine(cli.stderr);
      rows.push({
        file: f.filename, title: f.title, exit_code: cli.code, said, error_report_first_row: firstReason.slice(0, 200),
        runtime_text: RUNTIME_TEXT.test(said) || RUNTIME_TEXT.test(firstReason),
        seconds: Number(((Date.now() - started) / 1000).toFixed(1)),
        worker_peak_rss_mb: Math.round(Math.max(rss.peak, sampled)), neighbour_job: neighbour,
      });
      process.stderr.write(`${f.filename}: exit ${cli.code}, ${Math.round(rss.peak)} MB, neighbour ${neighbour}: ${said.slice(0, 160)}\n`);
      if (worker.exitCode !== null) throw new Error(`the worker exited (${worker.exitCode}) on ${f.filename}`);
    }
  } finally {
    const alive = worker.exitCode === null;
    if (alive) {
      const exited = new Promise((r) => worker.once('exit', r));
      worker.kill('SIGTERM');
      await exited;
    }
    await platform.stop();
    await db.stop();
    await rm(dataDir, { recursive: true, force: true });
  }
  const results = {
    measured_at: new Date().toISOString(), machine: { cpus: os.cpus().length, memory_gb: Math.round(os.totalmem() / 1e9) },
    load_average_at_start: loadStart.map((l) => Number(l.toFixed(2))), load_average_at_end: os.loadavg().map((l) => Number(l.toFixed(2))),
    limits: {
      BULK_MAX_COLUMNS: config.BULK_MAX_COLUMNS, BULK_MAX_CELL_CHARS: config.BULK_MAX_CELL_CHARS, BULK_MAX_ROWS: config.BULK_MAX_ROWS,
      BULK_XLSX_MAX_UNCOMPRESSED_BYTES: config.BULK_XLSX_MAX_UNCOMPRESSED_BYTES, BULK_XLSX_MAX_RATIO: config.BULK_XLSX_MAX_RATIO,
    },
    worker_rss_after_start_mb: Math.round(workerStartRss),
    worker_peak_rss_mb: Math.max(...rows.map((r) => r.worker_peak_rss_mb as number)),
    files: rows,
  };
  await writeFile(RESULTS, `${JSON.stringify(results, null, 2)}\n`);
  process.stdout.write(`| file | ldp upload exit | what it said | first error-report row | worker peak RSS (MB) | neighbour job |\n|---|---|---|---|---|---|\n`);
  for (const r of rows) {
    process.stdout.write(`| ${r.file} | ${r.exit_code} | ${String(r.said).replace(/\|/g, '\\|')} | ${String(r.error_report_first_row).replace(/\|/g, '\\|')} | ${r.worker_peak_rss_mb} | ${r.neighbour_job} |\n`);
  }
  process.stdout.write(`\nworker peak RSS over the corpus: ${results.worker_peak_rss_mb} MB (after start: ${results.worker_rss_after_start_mb} MB); load average ${results.load_average_at_start.join(' ')} → ${results.load_average_at_end.join(' ')}\n`);
}

await main();
