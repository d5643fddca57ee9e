/**
 * Native discover benchmark (`node --import tsx bench/discover-native.ts`): the query signals
 * answers from when the search service is down (lib/discover/native.ts), over real provider items.
 *
 * A fresh embedded PostgreSQL (own temp dir and port) is migrated; the PMGSY facilities of
 * `../shared/data` are stored as live provider items through `upsertItems` (the real write path,
 * searchable text included), then each query shape runs BENCH_RUNS times after 3 warm-ups and its
 * median and p95 latency are printed with the result total.
 *
 * Environment: BENCH_DATASET=medium (default: Haryana + Punjab, 19,118 rows) or large (six states,
 * 266,978 rows); BENCH_ITEMS (first N rows only); BENCH_RUNS (default 20).
 * Writes bench/results/discover-native-<dataset>.json.
 */
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createPool, withTransaction } from '../lib/platform/db.ts';
import { discoverNative } from '../lib/signals/discover/native.ts';
import type { DiscoverQuery } from '../lib/signals/discover/query.ts';
import { startEmbeddedPostgres } from '../lib/platform/embedded-postgres.ts';
import { createItemStateValidators, itemInputProblem, upsertItems, type ItemInput } from '../lib/network/items.ts';
import { migrate } from '../lib/platform/migrate.ts';
import { loadNetwork } from '../lib/network/config.ts';
import { freePort } from '../lib/platform/free-port.ts';
import { facilityItems } from './pmgsy-facilities.ts';

const repo = fileURLToPath(new URL('..', import.meta.url));
const DATASETS = {
  medium: path.resolve(repo, '../shared/data/pmgsy-schools-clinics-haryana-punjab/pmgsy_education_medical_haryana_punjab.csv'),
  large: path.resolve(repo, '../shared/data/pmgsy-rural-facilities/pmgsy_facilities_south_west_india.csv'),
};
const dataset = (process.env.BENCH_DATASET ?? 'medium') as keyof typeof DATASETS;
const limit = Number(process.env.BENCH_ITEMS ?? Infinity);
const runs = Number(process.env.BENCH_RUNS ?? 20);
const RESULTS = path.join(repo, `bench/results/discover-native-${dataset}.json`);



if (!DATASETS[dataset] || !existsSync(DATASETS[dataset])) {
  process.stderr.write(`No dataset ${dataset} at ${DATASETS[dataset]} (../shared must sit beside the repository)\n`);
  process.exit(1);
}

const network = await loadNetwork('local-discovery');
const provider = network.domains.get('provider')!;
const validators = createItemStateValidators(network);
const dir = await mkdtemp(path.join(os.tmpdir(), 'ldp-bench-discover-'));
const db = await startEmbeddedPostgres({ dataDir: dir, port: await freePort() });
const pool = createPool(db.url, 4);
try {
  await migrate(pool);

  // Load: rows become provider items (rows outside the schema, e.g. coordinates outside India, are skipped).
  const loadStarted = performance.now();
  let batch: ItemInput[] = [];
  let stored = 0;
  let skipped = 0;
  const flush = async () => {
    if (!batch.length) return;
    const items = batch;
    batch = [];
    await withTransaction(pool, (client) => upsertItems(client, network, items));
    stored += items.length;
  };
  let rows = 0;
  for await (const item of facilityItems(DATASETS[dataset], network, provider, () => crypto.randomUUID())) {
    if (rows++ >= limit) break;
    if (itemInputProblem(network, validators, item)) {
      skipped++;
      continue;
    }
    batch.push(item);
    if (batch.length === 1000) await flush();
  }
  await flush();
  await pool.query('ANALYZE signals.items');
  const loadSeconds = (performance.now() - loadStarted) / 1000;
  process.stdout.write(`loaded ${stored} items (${skipped} rows skipped) in ${loadSeconds.toFixed(1)} s\n`);

  // A centre inside the data: the median item location.
  const { rows: [centre] } = await pool.query<{ lat: number; lng: number; district: string }>(
    `SELECT (item_locations->0->>'lat')::float8 AS lat, (item_locations->0->>'lng')::float8 AS lng, item_state->>'district' AS district
       FROM signals.items ORDER BY item_id LIMIT 1`);
  const base = { network: network.id, domain: provider, filters: [], limit: 20, offset: 0 } satisfies Partial<DiscoverQuery>;
  const field = (name: string) => provider.fields.find((f) => f.name === name)!;
  const shapes: Record<string, DiscoverQuery> = {
    'newest (no condition)': { ...base },
    'newest, offset 10000': { ...base, offset: Math.min(10_000, Math.floor(stored / 2)) },
    'text "school"': { ...base, q: 'school' },
    'text misspelt "dispensry"': { ...base, q: 'dispensry' },
    'text two words': { ...base, q: `school ${centre.district}` },
    'filter category Medical': { ...base, filters: [{ field: field('category'), values: ['Medical'] }] },
    'filter district': { ...base, filters: [{ field: field('district'), values: [centre.district] }] },
    'bounding box ~20 km': { ...base, bbox: { minLat: centre.lat - 0.1, maxLat: centre.lat + 0.1, minLng: centre.lng - 0.1, maxLng: centre.lng + 0.1 } },
    'distance 10 km, nearest': { ...base, point: centre, distanceMeters: 10_000 },
    'ordering point (nearest over all)': { ...base, orderingCenter: centre },
    'text + distance 25 km': { ...base, q: 'school', point: centre, distanceMeters: 25_000 },
  };

  const results: Record<string, { median_ms: number; p95_ms: number; total: number }> = {};
  for (const [name, query] of Object.entries(shapes)) {
    const times: number[] = [];
    let total = 0;
    for (let i = 0; i < runs + 3; i++) {
      const started = performance.now();
      const page = await discoverNative(pool, network, query, true);
      if (i >= 3) times.push(performance.now() - started);
      total = page.meta.total;
    }
    times.sort((a, b) => a - b);
    const median = times[Math.floor(times.length / 2)];
    const p95 = times[Math.min(times.length - 1, Math.ceil(times.length * 0.95) - 1)];
    results[name] = { median_ms: Math.round(median * 10) / 10, p95_ms: Math.round(p95 * 10) / 10, total };
    process.stdout.write(`${name.padEnd(36)} median ${median.toFixed(1).padStart(7)} ms  p95 ${p95.toFixed(1).padStart(7)} ms  total ${total}\n`);
  }

  await mkdir(path.dirname(RESULTS), { recursive: true });
  await writeFile(RESULTS, `${JSON.stringify({
    benchmark: 'discover-native', dataset, items: stored, skipped_rows: skipped, load_seconds: Math.round(loadSeconds * 10) / 10,
    runs, cpus: os.cpus().length, load_average: os.loadavg().map((l) => Math.round(l * 100) / 100),
    measured_at: new Date().toISOString(), queries: results,
  }, null, 2)}\n`);
  process.stdout.write(`wrote ${path.relative(repo, RESULTS)}\n`);
} finally {
  await pool.end();
  await db.stop();
  await rm(dir, { recursive: true, force: true });
}
