/**
 * Signals' batched upsert alone (`npm run bench:signals-upsert`; issue 30): what PostgreSQL spends
 * on `upsertItems` (lib/network/items.ts) — the statement that stores a bulk upload's pushed items —
 * when the items are new, when every item changed, and when none did.
 *
 * The first BENCH_ITEMS (default 60,000) valid items of the facility file (../shared/data, read
 * from there by bench/pmgsy-facilities.ts) are stored on a fresh embedded database in batches
 * of 200 items (bulk onboarding's push size), one transaction each, through one connection; then
 * every item's locality is changed and the batches are stored again (after a CHECKPOINT, so the
 * pages' first writes carry their full-page images as in a real upload), twice; then the last
 * state is stored once more (unchanged). Figures: the backend's CPU seconds (its /proc stat) and
 * the wall time per 1,000 items for each pass. Prints them and writes bench/results/signals-upsert.json.
 */
import { randomUUID } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { loadNetwork } from '../lib/network/config.ts';
import { createItemStateValidators, itemInputProblem, upsertItems, type ItemInput } from '../lib/network/items.ts';
import { loadConfig } from '../lib/platform/config.ts';
import { startEmbeddedPostgres } from '../lib/platform/embedded-postgres.ts';
import { freePort } from '../lib/platform/free-port.ts';
import { migrate } from '../lib/platform/migrate.ts';
import { facilityItems } from './pmgsy-facilities.ts';

const repo = fileURLToPath(new URL('..', import.meta.url));
const SOURCE = path.resolve(repo, '../shared/data/pmgsy-rural-facilities/pmgsy_facilities_south_west_india.csv');
const RESULTS = path.join(repo, 'bench/results/signals-upsert.json');
const ITEMS = Number(process.env.BENCH_ITEMS ?? 60_000);
const BATCH = 200;

if (!existsSync(SOURCE)) {
  process.stderr.write(`skipped: ${SOURCE} is absent (../shared beside the project holds the facility file)\n`);
  process.exit(0);
}

const network = await loadNetwork(loadConfig().NETWORK);
const domain = network.domains.get('provider')!;
const validators = createItemStateValidators(network);
const items: ItemInput[] = [];
for await (const item of facilityItems(SOURCE, network, domain, () => randomUUID())) {
  if (items.length >= ITEMS) break;
  if (!itemInputProblem(network, validators, item)) items.push(item); // e.g. coordinates outside India
}
const withLocality = (suffix: string) => items.map((item) => ({ ...item, item_state: { ...item.item_state, locality: `${item.item_state.locality ?? ''} ${suffix}` } }));

const dataDir = await mkdtemp(path.join(os.tmpdir(), 'ldp-bench-signals-'));
const db = await startEmbeddedPostgres({ dataDir, port: await freePort() });
const pool = new pg.Pool({ connectionString: db.url, max: 1 });
pool.on('error', () => {});
const results: Record<string, unknown> = { items: items.length, batch_items: BATCH, source: path.relative(repo, SOURCE) };
try {
  await migrate(pool);
  const client = await pool.connect();
  client.on('error', () => {});
  const { rows: [{ pid }] } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
  /** The backend's user + system CPU seconds so far (/proc/<pid>/stat, clock ticks of 1/100 s). */
  const backendCpu = () => {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100;
  };
  const pass = async (name: string, batchItems: ItemInput[], expected: string) => {
    const cpu = backendCpu();
    const started = performance.now();
    const outcomes = new Map<string, number>();
    for (let i = 0; i < batchItems.length; i += BATCH) {
      await client.query('BEGIN');
      for (const r of await upsertItems(client, network, batchItems.slice(i, i + BATCH))) outcomes.set(r.outcome, (outcomes.get(r.outcome) ?? 0) + 1);
      await client.query('COMMIT');
    }
    if (outcomes.get(expected) !== batchItems.length) throw new Error(`${name}: expected ${batchItems.length} ${expected}, got ${JSON.stringify(Object.fromEntries(outcomes))}`);
    const perThousand = { backend_cpu_seconds: Number(((backendCpu() - cpu) / batchItems.length * 1000).toFixed(3)),
      wall_ms: Number(((performance.now() - started) / batchItems.length * 1000).toFixed(1)) };
    results[name] = perThousand;
    process.stdout.write(`${name}: ${perThousand.backend_cpu_seconds} CPU-s of PostgreSQL and ${perThousand.wall_ms} ms per 1,000 items\n`);
  };
  await pass('create', items, 'created');
  await client.query('CHECKPOINT');
  await pass('all_changed', withLocality('(changed)'), 'updated');
  await client.query('CHECKPOINT');
  const last = withLocality('(changed again)');
  await pass('all_changed_again', last, 'updated');
  await pass('unchanged', last, 'unchanged');
  client.release();
  results.load_average = os.loadavg().map((l) => Number(l.toFixed(2)));
  results.measured_at = new Date().toISOString();
  await writeFile(RESULTS, `${JSON.stringify(results, null, 2)}\n`);
  process.stdout.write(`written to ${path.relative(repo, RESULTS)}\n`);
} finally {
  await pool.end();
  await db.stop();
  await rm(dataDir, { recursive: true, force: true });
}
