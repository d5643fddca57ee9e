/**
 * The search engine of a process: the embedding provider, the vector backend recorded by the
 * migrations with its VectorIndex (pgvector: the HNSW indexes in PostgreSQL, whose graph the search
 * service keeps — `startVectorIndex`; usearch: the in-process index, opened only by the search
 * service, so a worker sharing the process keeps no copy), and a cache of query-text embeddings.
 * Built on first use per platform context.
 */
import pLimit, { type LimitFunction } from 'p-limit';
import { withClient, withTransaction, type Pool } from '../platform/db.ts';
import type { Metrics } from '../platform/metrics.ts';
import type { Logger } from '../platform/logger.ts';
import type { EmbeddingProvider } from './embeddings/index.ts';
import type { Network } from '../network/config.ts';
import type { PlaceRead, SearchEngine } from './query.ts';
import { dims, readVectorBackend, type SqlRunner, type VectorBackendName } from './vector-backend.ts';
import { pgvectorIndex, type VectorIndex } from './vector-index.ts';
import { openUsearchIndex, type UsearchIndex } from './usearch-index.ts';
import { startGraphUpkeep } from './pgvector-graph.ts';

/** Query texts whose embeddings are kept (least recently used dropped first). */
const TEXT_CACHE_SIZE = 1000;

/**
 * A search engine over `transaction`'s database, with a query-text embedding cache. `index` is
 * the vector index (default: pgvector's for that backend, none for usearch until
 * `attachIndex`); while it is missing or not ready, searches take the exact path (logged once
 * per change through `logger`).
 */
export function createSearchEngine(parts: {
  network: Network;
  backend: VectorBackendName;
  provider: EmbeddingProvider;
  transaction<T>(fn: (db: SqlRunner) => Promise<T>): Promise<T>;
  index?: VectorIndex;
  exactMaxRows?: number;
  totalExactBound?: number;
  placeRead?: PlaceRead;
  logger?: Logger;
}): SearchEngine & { attachIndex(index: VectorIndex): void; index?: VectorIndex } {
  const cache = new Map<string, Promise<Float32Array>>();
  let wasReady: boolean | undefined;
  const engine = {
    ...parts,
    index: parts.index ?? (parts.backend === 'pgvector' ? pgvectorIndex(dims(parts.provider.version)) : undefined),
    attachIndex(index: VectorIndex) {
      engine.index = index;
    },
    vectorIndex() {
      const ready = engine.index?.ready() ?? false;
      if (ready !== wasReady && engine.index) {
        if (ready) parts.logger?.info({ backend: parts.backend }, 'vector index ready: searches use it');
        else parts.logger?.warn({ backend: parts.backend }, 'vector index not ready: searches take the exact path');
      }
      wasReady = ready;
      return ready ? engine.index : undefined;
    },
    embedText(text: string) {
      let vector = cache.get(text);
      if (vector) {
        cache.delete(text); // re-inserted below as the most recent
      } else {
        vector = parts.provider.embed([text]).then(([v]) => v);
        vector.catch(() => cache.delete(text));
      }
      cache.set(text, vector);
      if (cache.size > TEXT_CACHE_SIZE) cache.delete(cache.keys().next().value!);
      return vector;
    },
  };
  return engine;
}

/** What building an engine needs of a process (the platform context satisfies it). */
export interface SearchEngineDeps {
  pool: Pool;
  network: Network;
  logger: Logger;
  config: { dataDirPath: string };
  /** The process's embedding provider (created once, shared). */
  embeddings(): Promise<EmbeddingProvider>;
}

type Engine = ReturnType<typeof createSearchEngine>;
const engines = new WeakMap<SearchEngineDeps, Promise<Engine>>();

/**
 * The engine of `ctx`, built on first call (a failed build is retried on the next call).
 * @throws Error when the provider cannot be created or the index schema is missing.
 */
export function searchEngine(ctx: SearchEngineDeps): Promise<Engine> {
  let engine = engines.get(ctx);
  if (!engine) {
    engine = (async () => {
      const provider = await ctx.embeddings();
      const backend = await readVectorBackend(ctx.pool);
      // A search only reads: under READ COMMITTED each statement takes its own snapshot inside a
      // transaction too, so BEGIN and COMMIT would be two round trips for nothing — except for
      // pgvector, whose HNSW settings are transaction-local (hnswSettings).
      const transaction = <T>(fn: (db: SqlRunner) => Promise<T>) => (backend === 'pgvector' ? withTransaction(ctx.pool, fn) : withClient(ctx.pool, fn));
      return createSearchEngine({ network: ctx.network, backend, provider, logger: ctx.logger, transaction });
    })();
    engine.catch(() => engines.delete(ctx));
    engines.set(ctx, engine);
  }
  return engine;
}

const slots = new WeakMap<object, LimitFunction>();
const slotsOf = (ctx: { config: { SEARCH_CONCURRENCY: number } }): LimitFunction => {
  let limit = slots.get(ctx);
  if (!limit) slots.set(ctx, limit = pLimit(ctx.config.SEARCH_CONCURRENCY));
  return limit;
};

/**
 * Runs `search` once fewer than SEARCH_CONCURRENCY searches of this process are running; the
 * others wait in arrival order (p-limit's queue). A search alternates between this process's CPU
 * and PostgreSQL's; with every request admitted at once (up to the pool's connections), 16
 * concurrent searches on two cores share them round-robin, statement by statement, so each one
 * waits behind the others once per statement and the slowest take twice the median. A few at a
 * time keep both busy and serve the rest in order: 16 text searches at a time on the full file,
 * p95 276–342 → 145–177 ms with 2–4 slots on two cores (docs/decisions.md, 2026-11-25).
 * @returns what `search` returns; rejects as it does.
 */
export function inSearchSlot<T>(ctx: { config: { SEARCH_CONCURRENCY: number } }, search: () => Promise<T>): Promise<T> {
  return slotsOf(ctx)(search);
}

/**
 * Starts the search service's vector index: for the usearch backend, opens (loads or builds in
 * the background) the in-process index under DATA_DIR and attaches it to the engine; for pgvector,
 * starts the upkeep of the HNSW graph (lib/search/pgvector-graph.ts). Called once by the search
 * service at start; the index (or upkeep) stops with `ctx`.
 * @returns the engine's index (undefined when the engine cannot be built; logged by the caller).
 */
export async function startVectorIndex(ctx: SearchEngineDeps & { onClose(fn: () => Promise<void>): void; config: { SEARCH_CONCURRENCY: number } }): Promise<VectorIndex | undefined> {
  const engine = await searchEngine(ctx);
  if (engine.backend === 'usearch' && !engine.index) {
    // Its catch-up yields to this process's searches (running or waiting for a slot).
    const slots = slotsOf(ctx);
    const index = openUsearchIndex({
      pool: ctx.pool, logger: ctx.logger, dataDir: ctx.config.dataDirPath, version: engine.provider.version,
      busy: () => slots.activeCount + slots.pendingCount > 0,
    });
    engine.attachIndex(index);
    // Closed (catch-up stopped, changes saved) before the pool closes, not left to hit an ended pool.
    ctx.onClose(() => index.close());
  }
  if (engine.backend === 'pgvector' && !(engine.index as ReturnType<typeof pgvectorIndex> | undefined)?.upkeep) {
    const upkeep = startGraphUpkeep({ pool: ctx.pool, logger: ctx.logger, dimensions: dims(engine.provider.version) });
    engine.attachIndex(pgvectorIndex(dims(engine.provider.version), upkeep));
    // Stopped (a build under way cancelled) before the pool closes.
    ctx.onClose(() => upkeep.close());
  }
  return engine.index;
}

/** The in-process index of `ctx`'s engine, if one is open. */
export async function usearchIndexOf(ctx: SearchEngineDeps): Promise<UsearchIndex | undefined> {
  const index = (await searchEngine(ctx)).index;
  return index?.backend === 'usearch' ? index as UsearchIndex : undefined;
}

/**
 * Readiness checks of the search service for `/ready`: the embedding provider (transformers with
 * its model, or hashing and why the model did not load) and the vector backend (pgvector | usearch)
 * with its index's state (usearch: loading, building, ready or failed; size; file).
 */
export async function searchReadiness(ctx: SearchEngineDeps): Promise<Record<string, { ok: boolean; [detail: string]: unknown }>> {
  try {
    const { provider, backend, index } = await searchEngine(ctx);
    return {
      embeddings: {
        ok: true, provider: provider.name, model_id: provider.version.model_id, quantization: provider.version.quantization,
        dimensions: provider.version.dimensions, ...(provider.fallbackReason ? { reason: provider.fallbackReason } : {}),
      },
      vector_backend: { ok: true, backend, ...(index?.status() ?? { state: 'not started' }) },
    };
  } catch (err) {
    return { search_engine: { ok: false, error: (err as Error).message } };
  }
}

/**
 * The search service's gauges in the process's registry (lib/platform/metrics.ts), read at each
 * scrape: `search_requests_waiting` (searches queued for a slot, inSearchSlot),
 * `search_index_items{backend}` (vectors in the vector index: usearch in this process, or
 * pgvector's indexed rows) and `search_index_pending_changes` (usearch: rows written to
 * search.items after the index's change cursor, i.e. the catch-up lag in rows; pgvector: the rows
 * of the tail, written since the graph, which searches read exactly: lib/search/pgvector-graph.ts).
 */
export function registerSearchMetrics(ctx: SearchEngineDeps & { metrics: Metrics; config: { SEARCH_CONCURRENCY: number } }): void {
  ctx.metrics.gauge('search_requests_waiting', 'Searches waiting for one of the SEARCH_CONCURRENCY slots of this process.', [],
    async () => [{ value: slotsOf(ctx).pendingCount }]);
  ctx.metrics.gauge('search_index_items', 'Vectors in the search service\'s vector index.', ['backend'], async () => {
    const { backend, index } = await searchEngine(ctx);
    return index ? [{ labels: { backend }, value: await index.size(ctx.pool) }] : [];
  });
  ctx.metrics.gauge('search_index_pending_changes', 'Rows written to search.items that the vector index has not taken in yet (usearch: not caught up; pgvector: in the tail, outside the graph).', [], async () => {
    const { backend } = await searchEngine(ctx);
    if (backend === 'pgvector') {
      const { rows: [row] } = await ctx.pool.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM (SELECT 1 FROM search.items WHERE ann_gen > (SELECT value::int FROM search.settings WHERE key = 'ann_graph_gen') LIMIT 1000000) pending`);
      return [{ value: row.n }];
    }
    const index = await usearchIndexOf(ctx);
    const cursor = index?.status().cursor;
    if (typeof cursor !== 'number') return [];
    const { rows: [row] } = await ctx.pool.query<{ n: number }>(
      'SELECT count(*)::int AS n FROM (SELECT 1 FROM search.items WHERE change_seq > $1 LIMIT 1000000) pending', [cursor]);
    return [{ value: row.n }];
  });
}
