/**
 * `ldp upload FILE --type provider [--column-map map.json | --mapping ID] [--wait]`: onboards a CSV or XLSX file
 * through the aggregator HTTP API of a running instance — creates the bulk upload
 * (`POST /v1/bulk-uploads`, the file streamed from disk), starts it with the operator's
 * attestation, and with `--wait` follows its progress until it ends.
 *
 * Where: `--url`, else AGGREGATOR_URL, else the instance recorded in `<DATA_DIR>/instance.json`,
 * else HOST and AGGREGATOR_PORT. Who: `--token`, else LDP_TOKEN, else `--aggregator ID`, for which
 * a one-hour operator token is minted locally with the built-in issuer (like `ldp token`).
 */
import { createWriteStream, openAsBlob } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import path from 'node:path';
import { createInterface } from 'node:readline/promises';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import cliProgress from 'cli-progress';
import { findAggregator } from '../../lib/aggregator/aggregators.ts';
import type { PreviewJson } from '../../lib/aggregator/bulk/preview.ts';
import type { BulkUploadJson } from '../../lib/aggregator/bulk/upload-jobs.ts';
import { serviceUrls } from '../../lib/platform/config.ts';
import { readInstance } from '../../lib/platform/instance.ts';
import { CliError, cliConfig, withPlatformContext } from '../command-context.ts';

export interface UploadOptions {
  type: string;
  columnMap?: string;
  /** Id of a saved mapping (instead of --column-map). */
  mapping?: string;
  wait?: boolean;
  attest?: boolean;
  token?: string;
  aggregator?: string;
  url?: string;
  errorsOut?: string;
  /** Milliseconds between progress polls. */
  interval?: string;
  /** Dry run: create the job, preview its first `rows` rows (an upsert or update: the whole file), print their outcomes; the job stays pending. */
  dryRun?: boolean;
  rows?: string;
  /** create (default), upsert or update (issue 30). */
  mode?: string;
  /** With upsert: the file is the whole list; participants it no longer holds are paused. */
  sync?: boolean;
  /** Sync: the count to pause the dry run reported. */
  confirmPause?: string;
  allowLargePause?: boolean;
}

const TERMINAL = new Set(['completed', 'failed']);

/** Base URL of the aggregator API (see the module comment). */
export async function aggregatorUrl(opts: { url?: string }): Promise<string> {
  if (opts.url) return opts.url;
  if (process.env.AGGREGATOR_URL) return process.env.AGGREGATOR_URL;
  const { config } = cliConfig();
  const instance = await readInstance(config.dataDirPath);
  return instance?.urls.aggregator ?? serviceUrls(config).aggregator;
}

/** Bearer token for the aggregator API (see the module comment). */
export async function bearerToken(opts: { token?: string; aggregator?: string }): Promise<string> {
  if (opts.token) return opts.token;
  if (process.env.LDP_TOKEN) return process.env.LDP_TOKEN;
  if (!opts.aggregator) throw new CliError('Give a bearer token with --token or LDP_TOKEN, or --aggregator ID to mint one locally');
  return withPlatformContext(async (ctx) => {
    const agg = await findAggregator(ctx.pool, opts.aggregator!);
    if (!agg) throw new CliError(`No aggregator with id ${opts.aggregator}`);
    return ctx.tokens.issue({
      sub: `aggregator:${agg.aggregator_id}`, aggregator_id: agg.aggregator_id, org_id: agg.org_id,
      aggregator_type: agg.types, roles: ['operator'],
    }, 3600);
  });
}

/** The operator's attestation: `--attest`, else a yes/no question on a terminal. */
async function attestation(opts: UploadOptions, file: string): Promise<void> {
  if (opts.attest) return;
  if (!process.stdin.isTTY) throw new CliError('Add --attest to attest that you have the authority to onboard the participants in this file');
  const rl = createInterface({ input: process.stdin, output: process.stderr });
  try {
    const answer = await rl.question(`Do you attest that you have the authority to onboard the participants in ${path.basename(file)}? [y/N] `);
    if (!/^y(es)?$/i.test(answer.trim())) throw new CliError('Not attested; nothing was uploaded');
  } finally {
    rl.close();
  }
}

/** Calls the aggregator API; shape-C errors become CliErrors with their detail. */
export async function call<T>(url: string, token: string, init: RequestInit = {}): Promise<T> {
  let res: Response;
  try {
    res = await fetch(url, { ...init, headers: { authorization: `Bearer ${token}`, ...init.headers } });
  } catch (err) {
    const cause = String((err as Error).cause ?? (err as Error).message);
    // The server answers a refusal of a large upload (a role, a size) at once and closes the connection: the rest of the file is not sent.
    if (init.body instanceof FormData && /EPIPE|ECONNRESET/.test(cause)) {
      throw new CliError(`${init.method ?? 'GET'} ${new URL(url).pathname}: the server closed the connection before the file was sent whole: `
        + 'it refused the upload (check that the token has the admin or operator role, and the file size against BULK_UPLOAD_MAX_BYTES)');
    }
    throw new CliError(`Cannot reach ${new URL(url).origin}: ${cause}. Is the platform running (ldp start)?`);
  }
  const text = await res.text();
  if (!res.ok) {
    let detail = text.slice(0, 500);
    try {
      detail = JSON.parse(text).error?.detail ?? detail;
    } catch { /* not JSON */ }
    throw new CliError(`${init.method ?? 'GET'} ${new URL(url).pathname} answered ${res.status}: ${detail}`);
  }
  return JSON.parse(text) as T;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs the dry run of `job` (polling until done); its first `--rows` rows (an upsert or update: the first that change) are listed. */
async function previewOf(base: string, token: string, job: BulkUploadJson, opts: UploadOptions): Promise<PreviewJson> {
  const rows = Number(opts.rows ?? 200);
  if (!Number.isInteger(rows) || rows < 1 || rows > 1000) throw new CliError('--rows must be a whole number from 1 to 1000');
  let preview = await call<PreviewJson>(`${base}/v1/bulk-uploads/${job.upload_id}/preview`, token, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ rows }),
  });
  const interval = Math.max(100, Number(opts.interval ?? 500));
  while (preview.status === 'pending') {
    await sleep(interval);
    preview = await call<PreviewJson>(`${base}/v1/bulk-uploads/${job.upload_id}/previews/${preview.preview_id}`, token);
  }
  return preview;
}

const shown = (v: unknown) => (v === null || v === undefined ? '(empty)' : Array.isArray(v) ? v.join('|') : String(v));

/** The lines a dry run prints: the rows listed as a table, the would-be counts, and for a sync job who would be paused. */
function previewLines(job: BulkUploadJson, preview: PreviewJson): string[] {
  const whole = preview.whole_file === true;
  const out: string[] = [whole
    ? `dry run of bulk upload ${job.upload_id} (${job.file_name ?? 'file'}, ${job.mode}${job.sync ? ', sync' : ''}): all ${preview.rows_read} data rows; nothing was written`
    : `dry run of bulk upload ${job.upload_id} (${job.file_name ?? 'file'}): first ${preview.rows_read} data rows; nothing was written`];
  if (preview.file_problem) out.push(`the upload would fail: ${preview.file_problem}`);
  if (preview.ignored_columns?.length) out.push(`ignored columns: ${preview.ignored_columns.join(', ')}`);
  const detail = (r: NonNullable<PreviewJson['rows']>[number]) => (r.changes
    ? r.changes.map((c) => `${c.field}: ${shown(c.before)} → ${shown(c.after)}`).join('; ')
    : r.errors.map((e) => e.message).join('; '));
  const rows = preview.rows ?? [];
  if (rows.length) {
    if (whole) out.push(`the first ${rows.length} rows that would change something:`);
    const table = [['row', 'outcome', whole ? 'changes, reasons' : 'reasons'], ...rows.map((r) => [String(r.row_number), r.outcome, detail(r)])];
    const widths = [0, 1].map((i) => Math.max(...table.map((r) => r[i].length)));
    for (const r of table) out.push(`${r[0].padStart(widths[0])}  ${r[1].padEnd(widths[1])}  ${r[2]}`.trimEnd());
  }
  const c = { passed: 0, failed: 0, skipped: 0, ...preview.counts };
  out.push(whole
    ? `would be: ${c.created ?? 0} created, ${c.updated ?? 0} updated, ${c.unchanged ?? 0} unchanged, ${c.failed} failed, ${c.skipped} skipped`
    : `would be: ${c.passed} passed, ${c.failed} failed, ${c.skipped} skipped`);
  if (preview.pause) {
    const listed = preview.pause.participants.slice(0, 10).map((p) => p.external_id ?? p.participant_id).join(', ');
    out.push(`to pause (no longer in the file): ${preview.pause.count}${preview.pause.count ? ` — ${listed}${preview.pause.count > 10 ? ', …' : ''}` : ''}`);
  }
  return out;
}

/** `--dry-run`: previews the job and prints it; the job stays pending. */
async function dryRun(base: string, token: string, job: BulkUploadJson, opts: UploadOptions, file: string): Promise<void> {
  const preview = await previewOf(base, token, job, opts);
  const out = previewLines(job, preview);
  const again = `ldp upload ${file} --type ${job.participant_type}${job.mode !== 'create' ? ` --mode ${job.mode}` : ''}`
    + `${job.sync ? ` --sync --confirm-pause ${preview.pause?.count ?? 0}` : ''} --attest --wait`;
  out.push(`the job stays pending; to onboard the file: ${again}`);
  process.stdout.write(out.join('\n') + '\n');
}

/**
 * The count to pause a sync upload confirms: `--confirm-pause`, checked against the job's own dry
 * run, or on a terminal the operator's yes to the dry run's count.
 * @throws CliError when they differ, or without a terminal and without --confirm-pause (the job stays pending)
 */
async function confirmedPause(base: string, token: string, job: BulkUploadJson, opts: UploadOptions): Promise<number> {
  const preview = await previewOf(base, token, job, opts);
  if (preview.file_problem) throw new CliError(`bulk upload ${job.upload_id} would fail: ${preview.file_problem}`);
  const count = preview.pause?.count ?? 0;
  if (opts.confirmPause !== undefined) {
    if (Number(opts.confirmPause) !== count) {
      throw new CliError(`the dry run of bulk upload ${job.upload_id} finds ${count} participants to pause, not ${opts.confirmPause}; nothing was started. `
        + 'Check it with --dry-run, then confirm its count with --confirm-pause');
    }
    return count;
  }
  if (!process.stdin.isTTY) {
    throw new CliError(`a sync upload pauses the participants the file no longer holds: run it with --dry-run first, then confirm the count with --confirm-pause N (this file: ${count})`);
  }
  process.stderr.write(previewLines(job, preview).join('\n') + '\n');
  const rl = createInterface({ input: process.stdin, output: process.stderr });
  try {
    const answer = await rl.question(`Pause these ${count} participants once the upload completes? [y/N] `);
    if (!/^y(es)?$/i.test(answer.trim())) throw new CliError(`Not confirmed; bulk upload ${job.upload_id} stays pending and nothing was written`);
  } finally {
    rl.close();
  }
  return count;
}

/** Runs `ldp upload`. */
export async function upload(file: string, opts: UploadOptions): Promise<void> {
  const info = await stat(file).catch(() => null);
  if (!info?.isFile()) throw new CliError(`No file ${file}`);
  let columnMap: string | undefined;
  if (opts.columnMap) {
    columnMap = await readFile(opts.columnMap, 'utf8').catch(() => {
      throw new CliError(`Cannot read the column map ${opts.columnMap}`);
    });
    try {
      JSON.parse(columnMap);
    } catch {
      throw new CliError(`${opts.columnMap} is not JSON: expected an object of file header → field name (or null)`);
    }
  }
  if (!opts.dryRun) await attestation(opts, file);
  const base = (await aggregatorUrl(opts)).replace(/(?<!\/)\/+$/, '');
  const token = await bearerToken(opts);

  const form = new FormData();
  form.set('participant_type', opts.type);
  if (columnMap) form.set('column_map', columnMap);
  if (opts.mapping) form.set('mapping_id', opts.mapping);
  if (opts.mode) form.set('mode', opts.mode);
  if (opts.sync) form.set('sync', 'true');
  // A file-backed Blob: fetch streams it from disk.
  form.set('file', await openAsBlob(file), path.basename(file));
  const started = Date.now();
  const created = await call<BulkUploadJson>(`${base}/v1/bulk-uploads`, token, { method: 'POST', body: form });
  const uploadedMs = Date.now() - started;
  if (opts.dryRun) {
    await dryRun(base, token, created, opts, file);
    return;
  }
  const sync = created.sync ? { confirm_pause: await confirmedPause(base, token, created, opts), allow_large_pause: opts.allowLargePause ?? false } : {};
  let job = await call<BulkUploadJson>(`${base}/v1/bulk-uploads/${created.upload_id}/start`, token, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ attestation: true, ...sync }),
  });
  process.stdout.write(`bulk upload ${job.upload_id}: ${path.basename(file)} (${job.file_format}, ${(info.size / 1e6).toFixed(1)} MB, uploaded in ${(uploadedMs / 1000).toFixed(1)} s) is ${job.status}\n`);
  if (!opts.wait) {
    process.stdout.write(`follow it with: curl -H "Authorization: Bearer $LDP_TOKEN" ${base}/v1/bulk-uploads/${job.upload_id}\n`);
    return;
  }

  const interval = Math.max(100, Number(opts.interval ?? 500));
  const bar = new cliProgress.SingleBar({
    format: '{bar} {percentage}% | {value}/{total} rows | passed {passed} failed {failed} skipped {skipped} | {rate} rows/s',
    hideCursor: true, etaBuffer: 20,
  }, cliProgress.Presets.shades_classic);
  let barStarted = false;
  while (!TERMINAL.has(job.status)) {
    await sleep(interval);
    job = await call<BulkUploadJson>(`${base}/v1/bulk-uploads/${job.upload_id}`, token);
    const done = job.passed + job.failed + job.skipped;
    const rate = Math.round(done / ((Date.now() - started) / 1000));
    const payload = { passed: job.passed, failed: job.failed, skipped: job.skipped, rate };
    if (job.total_rows !== null && !barStarted) {
      bar.start(job.total_rows, done, payload);
      barStarted = true;
    } else if (barStarted) {
      bar.update(done, payload);
    }
  }
  if (barStarted) bar.stop();
  const seconds = (Date.now() - started) / 1000;
  if (job.status === 'failed') throw new CliError(`bulk upload ${job.upload_id} failed: ${job.status_reason}`);
  const total = job.total_rows ?? 0;
  process.stdout.write([
    `completed: ${total} row${total === 1 ? '' : 's'} — ${job.passed} passed, ${job.failed} failed, ${job.skipped} skipped`
      + `${job.passed + job.failed + job.skipped === total ? '' : ' (counts do not add up!)'}`,
    ...(job.mode !== 'create' ? [`passed: ${job.created} created, ${job.updated} updated, ${job.unchanged} unchanged${job.sync ? `; paused: ${job.paused}` : ''}`] : []),
    ...(total === 0 ? ['the file has a header row but no data rows (blank rows are not counted): nothing was onboarded'] : []),
    `time: ${seconds.toFixed(1)} s from upload start to completion${total ? `, ${total / seconds < 10 ? (total / seconds).toFixed(1) : Math.round(total / seconds)} rows/s` : ''}`,
  ].join('\n') + '\n');
  if (!job.errors_csv_object_key) return;
  const reportUrl = `${base}/v1/bulk-uploads/${job.upload_id}/errors`;
  if (opts.errorsOut) {
    const res = await fetch(reportUrl, { headers: { authorization: `Bearer ${token}` } });
    if (!res.ok || !res.body) throw new CliError(`GET ${reportUrl} answered ${res.status}`);
    await pipeline(Readable.fromWeb(res.body as import('node:stream/web').ReadableStream), createWriteStream(opts.errorsOut));
    process.stdout.write(`error report (failed and skipped rows): ${opts.errorsOut}\n`);
  } else {
    process.stdout.write(`error report: object ${job.errors_csv_object_key}; download it with --errors-out FILE, or\n`
      + `  curl -H "Authorization: Bearer $LDP_TOKEN" -o errors.csv ${reportUrl}\n`);
  }
}
