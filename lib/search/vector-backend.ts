/**
 * The vector backends of the search index. sql/004_search_index.sql chose one at migration time
 * and recorded it in `search.settings` (sql/011_search_ann.sql renamed `exact` to `usearch`):
 * - `pgvector` (the server path): HNSW indexes with cosine distance on the expression
 *   `embedding::halfvec(n)` (pgvector README, "Indexing vectors with different dimensions": an
 *   expression index, partial on the rows of n dimensions), one per generation of the graph,
 *   kept by the search service (lib/search/pgvector-graph.ts, sql/034_search_pgvector_graph.sql),
 *   searched with iterative index scans (lib/search/vector-index.ts);
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
 * Condition: the row was embedded with `version` (model id and quantisation as placeholders; the
 * dimension count inline, as the partial HNSW index's predicate must be provable at planning).
 */
export function sameModelSql(alias: string, version: ModelVersion, model: { id: string; quantization: string }): string {
  return `${alias}.model_dimensions = ${dims(version)} AND ${alias}.model_id = ${model.id} AND ${alias}.model_quantization = ${model.quantization}`;
}

/**
 * Session settings for a pgvector search of `limit` rows, as the select list of one statement:
 * `ef_search` of twice the limit, at least 100 (pgvector's default of 40 misses close neighbours
 * among the many near-identical texts of real facility lists), at most 1000; with `threshold` (the
 * similar items of a text, up to a cap, not a ranked page) the limit itself: the graph's search was
 * most of a text request's PostgreSQL time, and a beam of 400 for 200 cost 10.5 ms a statement
 * against 7.3 (docs/decisions.md, issue 31). Strict-order iterative scans, which keep reading the
 * graph until enough rows pass the filters (pgvector 0.8 "Iterative Index Scans"), for up to ten
 * times the limit's tuples, at least 20,000. Transaction-local: run them inside the query's
 * transaction.
 */
export function hnswSettings(limit: number, threshold = false): string {
  const ef = Math.min(1000, Math.max(100, threshold ? limit : 2 * limit));
  return `set_config('hnsw.ef_search', '${ef}', true) AS ef_search, set_config('hnsw.iterative_scan', 'strict_order', true) AS iterative_scan,
    set_config('hnsw.max_scan_tuples', '${Math.max(20_000, limit * 10)}', true) AS max_scan_tuples`;
}
