/**
 * CPU per search request, in process (no HTTP): `runSearch` on a database kept by `npm run
 * bench:search` (BENCH_DIR), with the search service's index file of that directory. For each
 * query kind of bench/search.ts (the same intents, drawn from the rows in file order), the CPU
 * time per request of this process and of PostgreSQL (its backends), and with BENCH_PG_STATEMENTS=1
 * the statements that cost PostgreSQL most (pg_stat_statements, loaded by a restart). Besides
 * bench/search.ts's kinds, `near10` (text within 10 km), `near200` (text + filter within 200 km,
 * nearest or newest) and `places2` (text within two places) vary the combined searches. With
 * CPU_DUMP=file, every answer of the first round (total, flag, ids, scores, distances) is written
 * there, one line per query, so that two versions of the code can be diffed on the same data.
 * Usage: CPU_DIR=<BENCH_DIR> [CPU_KINDS=text,combined] [CPU_QUERIES=60] [CPU_ROUNDS=2] [CPU_DUMP=file]
 *   nice -n 19 node --import tsx bench/search-cpu.ts
 * Stop `npm run bench:search` first: both would start the same cluster.
 * The server path: with BENCH_DATABASE_URL, the database kept by `BENCH_DIR=… BENCH_DATABASE_URL=…
 * npm run bench:search` (ldp_bench_search_kept, bench/bench-database.ts) on that server, whose
 * graph this process's upkeep keeps (settled before measuring); PostgreSQL's CPU is the server's
 * (all its processes: run nothing else on it meanwhile).
 */
import { randomBytes } from 'node:crypto';
import { readdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { startPlatform } from '../bin/platform.ts';
import { loadConfig } from '../lib/platform/config.ts';
import { startEmbeddedPostgres } from '../lib/platform/embedded-postgres.ts';
import { benchDatabase } from './bench-database.ts';
import { freePort } from '../lib/platform/free-port.ts';
import { createLogger } from '../lib/platform/logger.ts';
import { searchEngine, startVectorIndex } from '../lib/search/engine.ts';
import { runSearch } from '../lib/search/query.ts';
import { searchBodySchema } from '../lib/search/request.ts';
import type { UsearchIndex } from '../lib/search/usearch-index.ts';
import { resetStatements, topStatements, withStatementStats } from './pg-statements.ts';
import { TEXTS } from './search-queries.ts';

const dir = path.resolve(process.env.CPU_DIR ?? '/tmp/ldp-bench-search');
const KINDS = (process.env.CPU_KINDS ?? 'text,filter,spatial,anchor,combined,newest').split(',');
const QUERIES = Number(process.env.CPU_QUERIES ?? 60);
const ROUNDS = Number(process.env.CPU_ROUNDS ?? 2);

const pgDir = path.join(dir, 'pg');
const db = process.env.BENCH_DATABASE_URL ? await benchDatabase({ dataDir: pgDir, label: 'search', keep: true })
  : await withStatementStats(await startEmbeddedPostgres({ dataDir: pgDir, port: await freePort() }), pgDir);
const url = db.url;
const config = loadConfig({
  ...process.env, LOG_LEVEL: 'warn', DATABASE_URL: url, DATA_DIR: path.join(dir, 'search'),
  INTERNAL_API_KEY: `ldp_internal_${randomBytes(32).toString('base64url')}`, PII_KEY: randomBytes(32).toString('base64'),
});
const platform = await startPlatform(config, createLogger('warn'), url, { services: [], worker: false });
try {
  const { ctx } = platform;
  const index = await startVectorIndex(ctx);
  if (index?.backend === 'usearch') await (index as UsearchIndex).whenSettled();
  else while ((index?.status().state) !== 'ready') await new Promise((r) => setTimeout(r, 500));
  const engine = await searchEngine(ctx);
  const network = ctx.network;
  const domain = network.domains.get('provider')!;

  // The rows in file order (bench/search.ts gives row n created_at = start + n s).
  const { rows: items } = await ctx.pool.query<{ item_id: string; category: string; district: string; lng: number; lat: number }>(
    `SELECT i.item_id::text, i.item_state->>'category' AS category, i.item_state->>'district' AS district, l.lng, l.lat
       FROM search.items i JOIN search.item_locations l ON l.item_id = i.item_id AND l.position = 0 ORDER BY i.created_at, i.item_id`);
  const pick = (i: number) => items[(i * 7919) % items.length];
  const point = (r: (typeof items)[number]) => ({ type: 'Point', coordinates: [r.lng, r.lat] });
  const districts = [...new Set(items.map((r) => r.district))];
  const categories = [...new Set(items.map((r) => r.category))].slice(0, 6);
  const intents: Record<string, (i: number) => Record<string, unknown>> = {
    text: (i) => ({ textSearch: TEXTS[i % TEXTS.length] }),
    filter: (i) => ({ filters: [
      { op: 'eq', target: 'item_state.category', value: categories[i % categories.length] },
      { op: 'in', target: 'item_state.district', value: [districts[i % districts.length], districts[(i + 3) % districts.length]] },
    ] }),
    spatial: (i) => ({ spatial: [{ op: 's_dwithin', geometry: point(pick(i)), distanceMeters: 10_000 }] }),
    anchor: (i) => ({ item: { id: pick(i).item_id } }),
    combined: (i) => ({
      textSearch: TEXTS[i % TEXTS.length],
      filters: [{ op: 'neq', target: 'item_state.category', value: categories[0] }],
      spatial: [{ op: 's_dwithin', geometry: point(pick(i)), distanceMeters: 50_000 }],
      orderingCenter: point(pick(i + 1)), sort: 'relevance',
    }),
    newest: () => ({}),
    near10: (i) => ({ textSearch: TEXTS[i % TEXTS.length], spatial: [{ op: 's_dwithin', geometry: point(pick(i)), distanceMeters: 10_000 }] }),
    near200: (i) => ({
      textSearch: TEXTS[i % TEXTS.length],
      filters: [{ op: 'neq', target: 'item_state.category', value: categories[1] }],
      spatial: [{ op: 's_dwithin', geometry: point(pick(i)), distanceMeters: 200_000 }],
      sort: i % 2 ? 'newest' : 'nearest',
    }),
    places2: (i) => ({
      textSearch: TEXTS[i % TEXTS.length],
      spatial: [{ op: 's_dwithin', geometry: point(pick(i)), distanceMeters: 80_000 }, { op: 's_dwithin', geometry: point(pick(i + 1)), distanceMeters: 300_000 }],
    }),
  };
  const dump: string[] = [];
  const body = (intent: Record<string, unknown>, i: number) => searchBodySchema.parse({
    context: { messageId: `cpu-${i}`, networkId: network.id, domain: domain.name, itemType: domain.itemType },
    message: { intent, pagination: { limit: 20, offset: i % 3 === 0 ? 20 : 0 } },
  });

  const postmaster = Number((await readFile(path.join(db.dataDir, 'postmaster.pid'), 'utf8')).split('\n')[0]);
  const pgCpuMs = async () => {
    let ms = 0;
    for (const entry of await readdir('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(f[1]) === postmaster || Number(entry) === postmaster) ms += (Number(f[11]) + Number(f[12])) * 10;
    }
    return ms;
  };
  for (const kind of KINDS) {
    const make = intents[kind];
    for (let i = 0; i < 3; i++) await runSearch(engine, body(make(i), i));
    for (let round = 0; round < ROUNDS; round++) {
      await resetStatements(ctx.pool);
      const pg0 = await pgCpuMs();
      const c0 = process.cpuUsage();
      let total = 0;
      for (let i = 0; i < QUERIES; i++) {
        const { message: { items: found, meta } } = await runSearch(engine, body(make(i), i));
        total += meta.total;
        if (round === 0) {
          dump.push(JSON.stringify({ kind, i, total: meta.total, estimated: meta.total_estimated ?? false,
            items: found.map((x) => [x.item_id, x.score?.toFixed(6), x.distanceMeters?.toFixed(3)]) }));
        }
      }
      const c = process.cpuUsage(c0);
      const pg = (await pgCpuMs()) - pg0;
      console.log(`${kind.padEnd(9)} round ${round + 1}: node ${((c.user + c.system) / 1000 / QUERIES).toFixed(2)} ms, PostgreSQL ${(pg / QUERIES).toFixed(2)} ms per query; mean total ${Math.round(total / QUERIES)}`);
      const top = await topStatements(ctx.pool, 8);
      if (top && round === ROUNDS - 1) {
        for (const s of top) console.log(`    ${(s.total_ms / QUERIES).toFixed(2)} ms/q  ${s.calls} calls ${s.rows} rows  ${s.query.slice(0, 160)}`);
      }
    }
  }
  await index?.close();
  if (process.env.CPU_DUMP) await writeFile(process.env.CPU_DUMP, `${dump.join('\n')}\n`);
} finally {
  await platform.stop();
  await db.stop();
}
