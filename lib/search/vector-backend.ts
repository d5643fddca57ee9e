/**
 * The vector backends of the search index. sql/004_search_index.sql chose one at migration time
 * and recorded it in `search.settings` (sql/011_search_ann.sql renamed `exact` to `usearch`):
 * - `pgvector`: an HNSW index with cosine distance per dimension count on the expression
 *   `embedding::halfvec(n)` (pgvector README, "Indexing vectors with different dimensions": an
 *   expression index, partial on the rows of n dimensions), searched with `hnsw.iterative_scan`
 *   so filtered and deep pages are not cut short by `hnsw.ef_search`;
 * - `usearch`: an in-process HNSW index kept by the search service (lib/search/usearch-index.ts).
 * Both store each embedding once, in half precision (sql/015_search_f16.sql): `halfvec` with
 * pgvector, a bytea of big-endian binary16 values otherwise (lib/search/half.ts).
 */
import type { ModelVersion } from './embeddings/index.ts';

export type VectorBackendName = 'pgvector' | 'usearch';

/** What runs SQL: a pg Pool or client, or a PGlite instance (same `query` shape). */
export interface SqlRunner {
  query<R = any>(sql: string, params?: unknown[]): Promise<{ rows: R[] }>;
}

/** The backend recorded by the migrations. @throws Error when the index schema is missing. */
export async function readVectorBackend(db: SqlRunner): Promise<VectorBackendName> {
  const { rows } = await db.query<{ value: string }>(`SELECT value FROM search.settings WHERE key = 'vector_backend'`);
  const value = rows[0]?.value;
  if (value !== 'pgvector' && value !== 'usearch') throw new Error(`search.settings has no valid vector_backend (${value ?? 'none'})`);
  return value;
}

/** The dimension count of `version`. @throws Error when it is not a positive integer. */
export function dims(version: ModelVersion): number {
  if (!Number.isInteger(version.dimensions) || version.dimensions <= 0) throw new Error(`invalid dimensions ${version.dimensions}`);
  return version.dimensions;
}

/**
 * Creates the HNSW cosine index for vectors of `version.dimensions` if it does not exist yet
 * (pgvector only; a no-op otherwise). Partial on live rows of that dimension count: search returns
 * live items only, and the cast to `vector(n)` is valid only for those rows.
 */
export async function ensureVectorIndex(db: SqlRunner, backend: VectorBackendName, version: ModelVersion): Promise<void> {
  if (backend !== 'pgvector') return;
  const n = dims(version);
  await db.query(`CREATE INDEX IF NOT EXISTS items_embedding_hnsw_h${n} ON search.items
    USING hnsw ((embedding::halfvec(${n})) halfvec_cosine_ops) WHERE model_dimensions = ${n} AND lifecycle_status = 'live'`);
}

/**
 * Condition: the row was embedded with `version` (model id and quantisation as placeholders; the
 * dimension count inline, as the partial HNSW index's predicate must be provable at planning).
 */
export function sameModelSql(alias: string, version: ModelVersion, model: { id: string; quantization: string }): string {
  return `${alias}.model_dimensions = ${dims(version)} AND ${alias}.model_id = ${model.id} AND ${alias}.model_quantization = ${model.quantization}`;
}

/**
 * Session settings for a pgvector search reaching `depth` rows: `ef_search` of twice the depth,
 * at least 100 (pgvector's default of 40 misses close neighbours among the many near-identical
 * texts of real facility lists), at most 1000; strict-order iterative scans, which keep reading
 * the graph until enough rows pass the filters (pgvector 0.8 "Iterative Index Scans").
 * Transaction-local: run them inside the query's transaction.
 */
export function hnswSettings(depth: number): string[] {
  const ef = Math.min(1000, Math.max(100, 2 * depth));
  return [
    `SELECT set_config('hnsw.ef_search', '${ef}', true)`,
    `SELECT set_config('hnsw.iterative_scan', 'strict_order', true)`,
    `SELECT set_config('hnsw.max_scan_tuples', '${Math.max(20_000, depth * 10)}', true)`,
  ];
}
