/**
 * The search engine of a process: the embedding provider, the vector backend recorded by the
 * migration (with the HNSW index for the provider's dimension count ensured once), and a cache of
 * query-text embeddings. Built on first use per platform context.
 */
import { withTransaction, type Pool } from '../platform/db.ts';
import type { EmbeddingProvider } from './embeddings/index.ts';
import type { Network } from '../network/config.ts';
import type { SearchEngine } from './query.ts';
import { ensureVectorIndex, readVectorBackend, type SqlRunner, type VectorBackendName } from './vector-backend.ts';

/** Query texts whose embeddings are kept (least recently used dropped first). */
const TEXT_CACHE_SIZE = 1000;

/** A search engine over `transaction`'s database, with a query-text embedding cache. */
export function createSearchEngine(parts: {
  network: Network;
  backend: VectorBackendName;
  provider: EmbeddingProvider;
  transaction<T>(fn: (db: SqlRunner) => Promise<T>): Promise<T>;
}): SearchEngine {
  const cache = new Map<string, Promise<Float32Array>>();
  return {
    ...parts,
    embedText(text) {
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
}

/** What building an engine needs of a process (the platform context satisfies it). */
export interface SearchEngineDeps {
  pool: Pool;
  network: Network;
  /** The process's embedding provider (created once, shared). */
  embeddings(): Promise<EmbeddingProvider>;
}

const engines = new WeakMap<SearchEngineDeps, Promise<SearchEngine>>();

/**
 * The engine of `ctx`, built on first call (a failed build is retried on the next call).
 * @throws Error when the provider cannot be created or the index schema is missing.
 */
export function searchEngine(ctx: SearchEngineDeps): Promise<SearchEngine> {
  let engine = engines.get(ctx);
  if (!engine) {
    engine = (async () => {
      const provider = await ctx.embeddings();
      const backend = await readVectorBackend(ctx.pool);
      await ensureVectorIndex(ctx.pool, backend, provider.version);
      return createSearchEngine({ network: ctx.network, backend, provider, transaction: (fn) => withTransaction(ctx.pool, fn) });
    })();
    engine.catch(() => engines.delete(ctx));
    engines.set(ctx, engine);
  }
  return engine;
}

/**
 * Readiness checks of the search service for `/ready`: the embedding provider (transformers with
 * its model, or hashing and why the model did not load) and the vector backend (pgvector | exact).
 */
export async function searchReadiness(ctx: SearchEngineDeps): Promise<Record<string, { ok: boolean; [detail: string]: unknown }>> {
  try {
    const { provider, backend } = await searchEngine(ctx);
    return {
      embeddings: {
        ok: true, provider: provider.name, model_id: provider.version.model_id, quantization: provider.version.quantization,
        dimensions: provider.version.dimensions, ...(provider.fallbackReason ? { reason: provider.fallbackReason } : {}),
      },
      vector_backend: { ok: true, backend },
    };
  } catch (err) {
    return { search_engine: { ok: false, error: (err as Error).message } };
  }
}
