/**
 * The vector backends of the search index (sql/004_search_index.sql chose one at migration time
 * and recorded it in `search.settings`):
 * - `pgvector`: the generated `embedding_vector` column, an HNSW index with cosine distance per
 *   dimension count (pgvector README, "Indexing vectors with different dimensions": an expression
 *   index on `embedding_vector::vector(n)`, partial on the rows of n dimensions), searched with
 *   `hnsw.iterative_scan` so filtered and deep pages are not cut short by `hnsw.ef_search`;
 * - `exact`: exact cosine over the real[] embedding, computed from its `cube` chunks.
 * Both give the cosine similarity of unit vectors (valid only between vectors of one model version,
 * `sameModelSql`); the query builder (lib/search/query.ts) takes
 * its SQL fragments from here, so one code path serves both.
 */
import type { ModelVersion } from './embeddings/index.ts';

export type VectorBackendName = 'pgvector' | 'exact';

/** What runs SQL: a pg Pool or client, or a PGlite instance (same `query` shape). */
export interface SqlRunner {
  query<R = any>(sql: string, params?: unknown[]): Promise<{ rows: R[] }>;
}

/** Dimensions per `cube` chunk (the cube extension's limit is 100). */
const CUBE_CHUNK = 100;

/** The backend recorded by the migration. @throws Error when the index schema is missing. */
export async function readVectorBackend(db: SqlRunner): Promise<VectorBackendName> {
  const { rows } = await db.query<{ value: string }>(`SELECT value FROM search.settings WHERE key = 'vector_backend'`);
  const value = rows[0]?.value;
  if (value !== 'pgvector' && value !== 'exact') throw new Error(`search.settings has no valid vector_backend (${value ?? 'none'})`);
  return value;
}

function dims(version: ModelVersion): number {
  if (!Number.isInteger(version.dimensions) || version.dimensions <= 0) throw new Error(`invalid dimensions ${version.dimensions}`);
  return version.dimensions;
}

/**
 * Creates the HNSW cosine index for vectors of `version.dimensions` if it does not exist yet
 * (pgvector only; a no-op for exact). Partial on live rows of that dimension count: search returns
 * live items only, and the cast to `vector(n)` is valid only for those rows.
 */
export async function ensureVectorIndex(db: SqlRunner, backend: VectorBackendName, version: ModelVersion): Promise<void> {
  if (backend !== 'pgvector') return;
  const n = dims(version);
  await db.query(`CREATE INDEX IF NOT EXISTS items_embedding_hnsw_${n} ON search.items
    USING hnsw ((embedding_vector::vector(${n})) vector_cosine_ops) WHERE model_dimensions = ${n} AND lifecycle_status = 'live'`);
}

/**
 * Condition: the row was embedded with `version` (model id and quantisation as placeholders; the
 * dimension count inline, as the partial HNSW index's predicate must be provable at planning).
 */
export function sameModelSql(alias: string, version: ModelVersion, model: { id: string; quantization: string }): string {
  return `${alias}.model_dimensions = ${dims(version)} AND ${alias}.model_id = ${model.id} AND ${alias}.model_quantization = ${model.quantization}`;
}

/** SQL fragments for one query vector; `param` is the placeholder holding it as a real[]. */
export interface VectorSql {
  /** Cosine similarity of the row's embedding with the query vector (valid only on `sameModel` rows). */
  similarity: (alias: string) => string;
  /**
   * pgvector only: the ORDER BY expression (cosine distance, ascending) that the HNSW index
   * serves. It must stand alone: a tiebreaker after it stops the index being used.
   */
  indexOrder?: (alias: string) => string;
}

/** The SQL fragments of `backend` for a query vector of `version`, passed in placeholder `param`. */
export function vectorSql(backend: VectorBackendName, version: ModelVersion, param: string): VectorSql {
  const n = dims(version);
  if (backend === 'pgvector') {
    const distance = (a: string) => `(${a}.embedding_vector::vector(${n}) <=> ${param}::real[]::vector(${n}))`;
    return { similarity: (a) => `(1 - ${distance(a)})`, indexOrder: distance };
  }
  // |a - b|^2 summed over the chunks; for unit vectors a.b = 1 - |a - b|^2 / 2.
  const chunks = Array.from({ length: Math.ceil(n / CUBE_CHUNK) }, (_, k) =>
    `power(cube_distance(${'%A'}.embedding_cubes[${k + 1}], cube((${param}::float8[])[${k * CUBE_CHUNK + 1}:${Math.min(n, (k + 1) * CUBE_CHUNK)}])), 2)`);
  const similarity = (a: string) => `(1 - (${chunks.join(' + ').replaceAll('%A', a)}) / 2)`;
  return { similarity };
}

/**
 * Session settings for a pgvector search reaching `depth` rows (offset + limit): `ef_search` of
 * twice the depth, at least 100 (pgvector's default of 40 misses close neighbours among the many
 * near-identical texts of real facility lists), at most 1000; strict-order iterative scans, which
 * keep reading the graph until enough rows pass the filters (pgvector 0.8 "Iterative Index Scans").
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
