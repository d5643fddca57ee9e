/**
 * Micro-benchmark of the bulk-upload file-format layer (no database, no HTTP):
 * `node --import tsx bench/bulk-rows.ts`.
 *
 * Reads the 266,978-row PMGSY facility CSV (in `../shared/data`) as providers, with the column
 * map fixture, in three measured passes:
 * - `parse`: openTable only (the encoding pass over the whole file, then csv-parse, trimming);
 * - `parse_coerce_validate`: openTable → matchHeaders → createRowCoercer per row (coercion, Ajv);
 * - `coerce_validate`: the coercer alone over rows already in memory (the first BENCH_COERCE_ROWS).
 * Each pass prints rows/s and the process's peak RSS so far (passes 1–2 stream; pass 3 holds its
 * rows in memory, so it comes last). The machine is shared: the load average before and after is
 * recorded too. The encoding pass always reads the whole file, also with BENCH_ROWS.
 *
 * Environment: BENCH_ROWS (first N rows only), BENCH_FILE (another CSV with the same columns),
 * BENCH_COERCE_ROWS (default 50,000). Writes bench/results/bulk-rows.json.
 */
import { createReadStream, existsSync, statSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { matchHeaders } from '../lib/aggregator/bulk/header-match.ts';
import { createRowCoercer } from '../lib/aggregator/bulk/row-coercion.ts';
import { openTable } from '../lib/aggregator/bulk/open-table.ts';
import { loadNetwork } from '../lib/network/config.ts';

const repo = fileURLToPath(new URL('..', import.meta.url));
const FILE = process.env.BENCH_FILE ?? path.resolve(repo, '../shared/data/pmgsy-rural-facilities/pmgsy_facilities_south_west_india.csv');
const COLUMN_MAP = path.join(repo, 'fixtures/column-maps/pmgsy-facilities.json');
const RESULTS = path.join(repo, 'bench/results/bulk-rows.json');
const LIMIT = Number(process.env.BENCH_ROWS ?? Infinity);
const COERCE_ROWS = Number(process.env.BENCH_COERCE_ROWS ?? 50_000);

if (!existsSync(FILE)) {
  console.error(`No file ${FILE}: the benchmark reads the PMGSY dataset from ../shared/data (or BENCH_FILE).`);
  process.exit(1);
}

const network = await loadNetwork('local-discovery');
const provider = network.domains.get('provider')!;
const columnMap = JSON.parse(await readFile(COLUMN_MAP, 'utf8')) as Record<string, string | null>;
const open = async () => createReadStream(FILE, { highWaterMark: 1 << 16 });
const loadAtStart = os.loadavg();
const peakRssMb = () => Math.round(process.resourceUsage().maxRSS / 1024);

/** Prints and returns a pass's figures; the peak RSS is the process's so far (it never decreases). */
function report(name: string, rows: number, ms: number): { rows: number; seconds: number; rows_per_second: number; peak_rss_mb_so_far: number } {
  const result = { rows, seconds: Number((ms / 1000).toFixed(3)), rows_per_second: Math.round(rows / (ms / 1000)), peak_rss_mb_so_far: peakRssMb() };
  console.log(`${name.padEnd(24)} ${String(rows).padStart(8)} rows  ${result.seconds.toFixed(2).padStart(6)} s  ${String(result.rows_per_second).padStart(8)} rows/s  peak RSS so far ${result.peak_rss_mb_so_far} MB`);
  return result;
}

// 1. Parse only.
let started = performance.now();
let table = await openTable(open, 'csv');
let rows = 0;
for await (const _row of table.rows) if (++rows === LIMIT) break;
table.close();
const parse = report('parse', rows, performance.now() - started);

// 2. The whole layer.
started = performance.now();
table = await openTable(open, 'csv');
const coerce = createRowCoercer(network, provider, matchHeaders(provider, table.headers, columnMap));
let passed = 0;
let failed = 0;
const sample: string[][] = [];
for await (const row of table.rows) {
  if (coerce(row.values).ok) passed++;
  else failed++;
  if (sample.length < COERCE_ROWS) sample.push(row.values);
  if (passed + failed === LIMIT) break;
}
table.close();
const whole = { ...report('parse_coerce_validate', passed + failed, performance.now() - started), passed, failed };

// 3. Coercion and validation alone, over rows in memory.
started = performance.now();
let coerced = 0;
for (let round = 0; round < 3; round++) for (const values of sample) if (coerce(values)) coerced++;
const coerceOnly = report('coerce_validate', coerced, performance.now() - started);

const results = {
  measured_at: new Date().toISOString(),
  machine: { cpus: os.cpus().length, model: os.cpus()[0]?.model.trim(), memory_gb: Math.round(os.totalmem() / 2 ** 30), node: process.version },
  load_average_at_start: loadAtStart.map((l) => Number(l.toFixed(2))),
  load_average_at_end: os.loadavg().map((l) => Number(l.toFixed(2))),
  file: path.relative(repo, FILE),
  bytes: statSync(FILE).size,
  encoding: table.encoding,
  parse,
  parse_coerce_validate: whole,
  coerce_validate: coerceOnly,
  peak_rss_mb: peakRssMb(),
};
console.log(`peak RSS ${results.peak_rss_mb} MB; load average ${results.load_average_at_start.join(' ')} → ${results.load_average_at_end.join(' ')}`);
await writeFile(RESULTS, `${JSON.stringify(results, null, 2)}\n`);
console.log(`wrote ${path.relative(repo, RESULTS)}`);
