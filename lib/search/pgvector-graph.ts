/**
 * pgvector's HNSW graph on the server path, kept by the search service (sql/034_search_pgvector_graph.sql,
 * docs/decisions.md "Self-hosting II"). Writes never add to the graph: each written row gets the
 * tail generation (search.settings `ann_tail_gen`), and the HNSW index of generation G covers the
 * live rows of one dimension count with `ann_gen <= G` (search.settings `ann_graph_gen`). A search
 * reads the graph through its index and the tail exactly (lib/search/vector-index.ts).
 *
 * The upkeep merges the tail into the graph every UPKEEP_MS, in one search process at a time (a
 * session advisory lock; the others skip their round):
 * - a tail of fewer than max(REBUILD_MIN_ROWS, REBUILD_SHARE x the graph's rows) is moved into the
 *   graph MOVE_BATCH rows per statement (`ann_gen = G`: PostgreSQL adds each row to the index, ~1 ms
 *   of its CPU per row on the full file);
 * - a larger tail, or no index yet, builds generation T (the tail's) over every row in one go
 *   (CREATE INDEX CONCURRENTLY: searches and writes go on; rows written meanwhile get T + 1), then
 *   G becomes T and the index of the old G is dropped. Building costs about half of moving per row
 *   and runs on PostgreSQL's parallel maintenance workers. A tail still growing (a bulk upload or a
 *   re-index under way) is built once it has been QUIET_MS without growing, or MAX_WAIT_MS after
 *   it passed the threshold, rather than once per upload chunk.
 * A build that fails or is interrupted (a stop cancels it) leaves an invalid index, dropped by the
 * next round, which builds again from the current tail. Indexes of this dimension count other than
 * G's are dropped likewise (left by a process that died between building and dropping).
 */
import type { Pool, PoolClient } from '../platform/db.ts';
import type { Logger } from '../platform/logger.ts';
import type { SqlRunner } from './vector-backend.ts';

/**
 * Build parameters of every generation (pgvector "HNSW", index options): 16 links per node and
 * 256 candidates while adding. The PMGSY texts are many and near-identical; pgvector's default of
 * 64 left clusters of them unreachable (recall@20 of the 20 benchmark texts 0.87 against 0.91 with
 * 128 on 50,000 rows, docs/decisions.md). 256 lets a text's similar items be searched with an
 * ef_search of their cap (hnswSettings): recall@20 0.9625 against 0.9575 with 128, for a build of
 * 119–145 s against 96–112 s on the full file (docs/decisions.md, issue 31).
 */
export const HNSW_BUILD = { m: 16, ef_construction: 256 };

/** How often the upkeep looks at the tail (ms). */
export const UPKEEP_MS = 1000;
/** A tail of fewer rows is always moved into the graph row by row... */
export const REBUILD_MIN_ROWS = 5000;
/** ...and so is a tail of fewer than this share of the graph's rows; a larger one builds a new generation. */
export const REBUILD_SHARE = 0.5;
/** A growing tail past the threshold is built once it has not grown for this long (ms)... */
export const QUIET_MS = 3000;
/** ...or this long after it first passed the threshold (ms). */
export const MAX_WAIT_MS = 60_000;
/** Rows moved into the graph per statement (~0.5 s of PostgreSQL at 1 ms a row). */
export const MOVE_BATCH = 500;
/** Memory for one build: its estimate of the graph's size, within these bounds (MB). */
const BUILD_MEMORY_MB = { min: 64, max: 1024 };

/** The HNSW index of generation `gen` for vectors of `dimensions` dimensions. */
export const graphIndexName = (dimensions: number, gen: number) => `items_embedding_hnsw_h${dimensions}_g${gen}`;

/** The generation of the graph (rows up to it are indexed) and of the tail (rows written now). */
export interface Generations { graph: number; tail: number }

/** The generations recorded in search.settings. @throws Error when migration 034 is missing. */
export async function readGenerations(db: SqlRunner): Promise<Generations> {
  const { rows } = await db.query<{ key: string; value: string }>(
    `SELECT key, value FROM search.settings WHERE key IN ('ann_graph_gen', 'ann_tail_gen')`);
  const value = (key: string) => {
    const v = rows.find((r) => r.key === key)?.value;
    if (v === undefined) throw new Error(`search.settings has no ${key} (migration 034 missing)`);
    return Number(v);
  };
  return { graph: value('ann_graph_gen'), tail: value('ann_tail_gen') };
}

/**
 * Builds the HNSW index of generation `gen` over the live rows of `dimensions` with ann_gen <= gen,
 * with HNSW_BUILD. `concurrently` (the upkeep): writes and searches go on meanwhile (outside a
 * transaction). Memory: maintenance_work_mem of the estimated graph size (pgvector builds in
 * memory while the graph fits, much faster), within BUILD_MEMORY_MB; parallel workers as the
 * server allows, serially when its shared memory cannot hold them (Docker's default /dev/shm);
 * no statement timeout. The session's settings are reset afterwards (a pooled connection).
 * @throws Error from PostgreSQL (the index is then left invalid or absent).
 */
export async function buildGraphIndex(db: SqlRunner, dimensions: number, gen: number, concurrently: boolean): Promise<void> {
  const { rows: [{ n }] } = await db.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM search.items WHERE model_dimensions = ${dimensions} AND lifecycle_status = 'live' AND ann_gen <= ${gen}`);
  const estimateMb = Math.ceil((n * (2 * dimensions + 64 * HNSW_BUILD.m + 200)) / 2 ** 20);
  await db.query(`SET maintenance_work_mem = '${Math.min(BUILD_MEMORY_MB.max, Math.max(BUILD_MEMORY_MB.min, estimateMb))}MB'`);
  // A server-wide statement_timeout would cut every build of a large graph short, round after round.
  await db.query('SET statement_timeout = 0');
  const name = graphIndexName(dimensions, gen);
  const create = `CREATE INDEX ${concurrently ? 'CONCURRENTLY ' : ''}IF NOT EXISTS ${name} ON search.items
    USING hnsw ((embedding::halfvec(${dimensions})) halfvec_cosine_ops) WITH (m = ${HNSW_BUILD.m}, ef_construction = ${HNSW_BUILD.ef_construction})
    WHERE model_dimensions = ${dimensions} AND lifecycle_status = 'live' AND ann_gen <= ${gen}`;
  try {
    await db.query(create);
  } catch (err) {
    if (!/shared memory/i.test((err as Error).message)) throw err;
    await db.query(`DROP INDEX ${concurrently ? 'CONCURRENTLY ' : ''}IF EXISTS search.${name}`);
    await db.query('SET max_parallel_maintenance_workers = 0');
    try {
      await db.query(create);
    } finally {
      await db.query('RESET max_parallel_maintenance_workers');
    }
  } finally {
    await db.query('RESET maintenance_work_mem');
    await db.query('RESET statement_timeout');
  }
}

/**
 * Takes the whole tail into the graph at once: the tail's generation T is built over every row
 * (buildGraphIndex), rows written meanwhile get T + 1, then the graph's generation becomes T and
 * the index of the previous one is dropped. `concurrently` (the upkeep) as buildGraphIndex; else
 * (tests, a caller that holds off searches) plain statements. `from`: the generations as just read.
 * @returns the graph's new generation. @throws Error from PostgreSQL (generations as they were,
 * but for the tail's, which moved on: harmless).
 */
export async function buildGeneration(db: SqlRunner, dimensions: number, options: { concurrently: boolean; from?: Generations }): Promise<number> {
  const gens = options.from ?? await readGenerations(db);
  const gen = gens.tail;
  await db.query(`UPDATE search.settings SET value = $1, updated_at = now() WHERE key = 'ann_tail_gen'`, [String(gen + 1)]);
  await buildGraphIndex(db, dimensions, gen, options.concurrently);
  await db.query(`UPDATE search.settings SET value = $1, updated_at = now() WHERE key = 'ann_graph_gen'`, [String(gen)]);
  await db.query(`DROP INDEX ${options.concurrently ? 'CONCURRENTLY ' : ''}IF EXISTS search.${graphIndexName(dimensions, gens.graph)}`);
  return gen;
}

type State = 'starting' | 'ready' | 'building' | 'failed' | 'closed';

export interface GraphUpkeep {
  /**
   * Facts for /ready: state (`starting` until the first round ends, `building` while a generation
   * is built, `failed` after a failed round until one succeeds), graph generation, tail rows counted
   * by the last round (up to the rebuild threshold), the last build's seconds.
   */
  status(): Record<string, unknown>;
  /** One round now (after the one running, if any). @returns what it did. */
  runOnce(): Promise<'none' | 'moved' | 'built' | 'waiting' | 'skipped'>;
  /** Stops the rounds; cancels a build under way (the next start builds again). */
  close(): Promise<void>;
}

const LOCK_KEY = 'ldp:pgvector-graph';

/**
 * Starts the upkeep of the graph for vectors of `dimensions` (the search service, pgvector
 * backend): a round at once, then every `intervalMs` (UPKEEP_MS); `manual`: only when runOnce is
 * called (tests). `rebuildMinRows` and `quietMs` replace REBUILD_MIN_ROWS and QUIET_MS (tests).
 * Never throws: a failed round is logged and the next one tries again.
 */
export function startGraphUpkeep(deps: {
  pool: Pool; logger: Logger; dimensions: number; intervalMs?: number; manual?: boolean; rebuildMinRows?: number; quietMs?: number;
}): GraphUpkeep {
  const { pool, dimensions } = deps;
  const rebuildMinRows = deps.rebuildMinRows ?? REBUILD_MIN_ROWS;
  const quietMs = deps.quietMs ?? QUIET_MS;
  const log = deps.logger.child({ component: 'vector-index', backend: 'pgvector' });
  const prefix = `items_embedding_hnsw_h${dimensions}_g`;
  let state: State = 'starting';
  let generation: number | undefined;
  let tailRows: number | undefined;
  let buildSeconds: number | undefined;
  /** The tail at the previous round, and since when it has been over the threshold. */
  let lastTail = -1;
  let overSince: number | undefined;
  let quietSince = Date.now();
  /** The backend running this round's statements, to cancel a build at close. */
  let backendPid: number | undefined;
  let timer: NodeJS.Timeout | undefined;
  let busy: Promise<unknown> = Promise.resolve();

  async function round(client: PoolClient): Promise<'none' | 'moved' | 'built' | 'waiting'> {
    const gens = await readGenerations(client);
    generation = gens.graph;
    // Indexes of this dimension count other than the graph's valid one: failed or abandoned builds.
    const { rows: indexes } = await client.query<{ name: string; valid: boolean; tuples: number }>(
      `SELECT c.relname AS name, x.indisvalid AS valid, c.reltuples::float8 AS tuples
         FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
        WHERE x.indrelid = 'search.items'::regclass AND starts_with(c.relname, $1)`, [prefix]);
    for (const index of indexes) {
      if (index.name === graphIndexName(dimensions, gens.graph) && index.valid) continue;
      log.warn({ index: index.name, valid: index.valid }, 'dropping an HNSW index that is not the graph\'s (a build that failed or was interrupted)');
      await client.query(`DROP INDEX CONCURRENTLY IF EXISTS search.${index.name}`);
    }
    const graph = indexes.find((i) => i.name === graphIndexName(dimensions, gens.graph) && i.valid);
    const graphRows = Math.max(0, graph?.tuples ?? 0);
    // Whole rows: half an odd graph (or a fractional reltuples) is no LIMIT.
    const threshold = Math.floor(Math.max(rebuildMinRows, REBUILD_SHARE * graphRows));
    // Counted up to the threshold: past it, the exact size changes nothing.
    const { rows: [{ n: tail }] } = await client.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM (SELECT 1 FROM search.items WHERE ann_gen > $1 LIMIT $2) t`, [gens.graph, threshold + 1]);
    tailRows = tail;
    const now = Date.now();
    if (tail !== lastTail) quietSince = now;
    lastTail = tail;
    if (tail === 0 && (graph || gens.graph === 0)) {
      overSince = undefined;
      return 'none';
    }
    if (!graph || tail > threshold) {
      overSince ??= now;
      // No index yet: built at once (searches read every row exactly meanwhile).
      if (graph && now - quietSince < quietMs && now - overSince < MAX_WAIT_MS) return 'waiting';
      await build(client, gens);
      overSince = undefined;
      return 'built';
    }
    overSince = undefined;
    // At most the tail counted now: rows written meanwhile wait for the next round, which decides again.
    for (let moved = 0, last = MOVE_BATCH; moved < tail && last === MOVE_BATCH && state !== 'closed'; moved += last) {
      const result = await client.query(
        `UPDATE search.items SET ann_gen = $1 WHERE ann_key IN (SELECT ann_key FROM search.items WHERE ann_gen > $1 LIMIT ${MOVE_BATCH})`, [gens.graph]);
      last = result.rowCount ?? 0;
    }
    return 'moved';
  }

  /** Builds the tail's generation over every row (buildGeneration). */
  async function build(client: PoolClient, gens: Generations): Promise<void> {
    state = 'building';
    const started = performance.now();
    log.info({ generation: gens.tail }, 'building the HNSW graph of every vector in one go (searches read the rows written since the last graph exactly meanwhile)');
    generation = await buildGeneration(client, dimensions, { concurrently: true, from: gens });
    buildSeconds = (performance.now() - started) / 1000;
    state = 'ready';
    log.info({ generation, seconds: Math.round(buildSeconds * 10) / 10 }, 'HNSW graph built: searches use it');
  }

  const runOnce = () => {
    const next = busy.then(async () => {
      if (state === 'closed') return 'skipped' as const;
      const client = await pool.connect();
      try {
        const { rows: [lock] } = await client.query<{ locked: boolean; pid: number }>(
          'SELECT pg_try_advisory_lock(hashtext($1)) AS locked, pg_backend_pid() AS pid', [LOCK_KEY]);
        if (!lock.locked) return 'skipped' as const; // another search process keeps the graph
        backendPid = lock.pid;
        try {
          const did = await round(client);
          if ((state as State) !== 'closed') state = 'ready';
          return did;
        } finally {
          backendPid = undefined;
          await client.query('SELECT pg_advisory_unlock(hashtext($1))', [LOCK_KEY]).catch(() => {});
        }
      } catch (err) {
        if ((state as State) !== 'closed') {
          state = 'failed';
          log.error({ err: (err as Error).message }, 'HNSW graph upkeep failed (tried again)');
        }
        throw err;
      } finally {
        client.release();
      }
    });
    busy = next.catch(() => {});
    return next;
  };

  const tick = () => {
    timer = setTimeout(() => {
      if ((pool as { ending?: boolean }).ending) return;
      void runOnce().catch(() => {}).finally(() => {
        if (state !== 'closed') tick();
      });
    }, deps.intervalMs ?? UPKEEP_MS);
    timer.unref();
  };
  if (!deps.manual) {
    void runOnce().catch(() => {}).finally(() => {
      if (state !== 'closed') tick();
    });
  }

  return {
    status: () => ({
      state, graph_generation: generation, tail_rows: tailRows,
      ...(buildSeconds !== undefined ? { build_seconds: Math.round(buildSeconds * 10) / 10 } : {}),
    }),
    runOnce,
    async close() {
      state = 'closed';
      clearTimeout(timer);
      // A build can take minutes: cancelled, it leaves an invalid index that the next start drops.
      if (backendPid !== undefined) await pool.query('SELECT pg_cancel_backend($1)', [backendPid]).catch(() => {});
      await busy;
    },
  };
}
