/**
 * The `VectorIndex` of the search service: nearest neighbours of a query vector among the rows of
 * `search.items` that pass a candidate filter (SQL), with two implementations chosen at start
 * (lib/search/engine.ts, reported by /ready):
 * - pgvector: the HNSW index inside PostgreSQL (this file);
 * - usearch: an in-process HNSW index kept by the search service (lib/search/usearch-index.ts).
 * Candidates come ordered by similarity, then newest, then item id (spec tie rule); the index's
 * similarities are approximate (graph search, and half-precision query vectors in pgvector), so callers
 * `refine` the ones they show: recomputed exactly from the stored (binary16) embeddings and re-ranked.
 * `exactNearest` is the exact path both share (few rows, or an index not ready).
 */
import { cosineSimilarity } from '../network/cosine.ts';
import { decodeHalf } from './half.ts';
import type { VectorBackendName, SqlRunner } from './vector-backend.ts';

/** A row near the query vector: exact cosine similarity; `t` = created_at in microseconds since 1970. */
export interface Neighbour {
  item_id: string;
  similarity: number;
  t: number;
}

/**
 * A condition over the row alias `i` of `search.items` with its parameters ($1..$n in `where`).
 * It must include `lifecycle_status = 'live'` and the model-version condition (sameModelSql).
 */
export interface CandidateFilter {
  where: string;
  params: unknown[];
}

export interface VectorIndex {
  readonly backend: VectorBackendName;
  /** Whether the index can answer now (false while the in-process index is built: callers use exactNearest). */
  ready(): boolean;
  /** Vectors indexed (pgvector: the live rows of the model version). */
  size(db: SqlRunner): Promise<number>;
  /**
   * Up to `k` nearest rows passing `filter`, most similar first (ties newest, then item id
   * descending), with approximate similarities. It may return fewer than `k` although more rows
   * pass (widening stopped at its budget); the caller then takes the exact path.
   */
  search(db: SqlRunner, vector: Float32Array, k: number, filter: CandidateFilter): Promise<Neighbour[]>;
  /** Adds or replaces vectors by their `ann_key` (no-op for pgvector: PostgreSQL maintains its index). */
  upsert(entries: { key: bigint; vector: Float32Array }[]): void;
  /** Removes vectors by `ann_key` (no-op for pgvector). */
  remove(keys: bigint[]): void;
  /** Builds the index again from search.items (pgvector: REINDEX). */
  rebuild(): Promise<void>;
  /** Facts for /ready (backend, state, size, file). */
  status(): Record<string, unknown>;
  /** Stops background work (and saves the in-process index). */
  close(): Promise<void>;
}

/** A bytea column as bytes: node-postgres gives a Buffer, PGlite a Uint8Array. */
export function bytesOf(value: unknown): Uint8Array {
  if (value instanceof Uint8Array) return value;
  throw new Error('expected a bytea value');
}


/** The spec's order for ranked results: similarity, then newest, then item id, all descending. */
export function byRank(a: Neighbour, b: Neighbour): number {
  return b.similarity - a.similarity || b.t - a.t || (a.item_id < b.item_id ? 1 : a.item_id > b.item_id ? -1 : 0);
}

/** Columns of a candidate (row alias `i`): id and created_at in microseconds. */
export const CANDIDATE_COLUMNS = `i.item_id::text AS item_id, (extract(epoch FROM i.created_at) * 1000000)::int8 AS t`;

/** Columns a neighbour needs (row alias `i`): `e` the stored embedding as big-endian binary16 (lib/search/half.ts). */
export const NEIGHBOUR_COLUMNS = `i.item_id::text AS item_id, (extract(epoch FROM i.created_at) * 1000000)::int8 AS t, search.embedding_f16(i.embedding) AS e`;

/**
 * Neighbours from rows of NEIGHBOUR_COLUMNS: exact similarities, ordered by rank. The cosine, not
 * the dot product: stored vectors are unit length only to half precision (~1e-4).
 */
export function rankRows(vector: Float32Array, rows: { item_id: string; t: string | number | bigint; e: unknown }[]): Neighbour[] {
  return rows.map((r) => ({ item_id: r.item_id, t: Number(r.t), similarity: cosineSimilarity(vector, decodeHalf(bytesOf(r.e))) })).sort(byRank);
}

/**
 * `found` with the similarities of its first `top` recomputed exactly and those re-ranked (the rest
 * follows as found). Costs one read of `top` embeddings.
 */
export async function refine(db: SqlRunner, vector: Float32Array, found: Neighbour[], top: number): Promise<Neighbour[]> {
  const head = found.slice(0, top);
  if (!head.length) return found;
  const { rows } = await db.query(`SELECT ${NEIGHBOUR_COLUMNS} FROM search.items i WHERE i.item_id = ANY($1::uuid[])`, [head.map((n) => n.item_id)]);
  return [...rankRows(vector, rows), ...found.slice(top)];
}

/**
 * The exact path: every row passing `filter`, its cosine computed from the stored embedding, the
 * first `k` by rank. Cost grows with the rows passing (about 1 µs per dimension per thousand rows
 * plus the transfer), so callers use it when the filter leaves few rows.
 */
export async function exactNearest(db: SqlRunner, vector: Float32Array, k: number, filter: CandidateFilter): Promise<Neighbour[]> {
  const { rows } = await db.query(`SELECT ${NEIGHBOUR_COLUMNS} FROM search.items i WHERE ${filter.where}`, filter.params);
  return rankRows(vector, rows).slice(0, k);
}

/**
 * The pgvector implementation: `ORDER BY embedding::halfvec(n) <=> query` alone (no tiebreaker,
 * so the partial HNSW expression index serves it) under `hnsw.iterative_scan = strict_order`,
 * the found rows then re-ranked exactly (ties by the spec's rule).
 */
export function pgvectorIndex(dimensions: number, settings: (depth: number) => string[]): VectorIndex {
  return {
    backend: 'pgvector',
    ready: () => true,
    async size(db) {
      const { rows: [row] } = await db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM search.items WHERE model_dimensions = ${dimensions} AND lifecycle_status = 'live'`);
      return row.n;
    },
    async search(db, vector, k, filter) {
      for (const setting of settings(k)) await db.query(setting);
      const q = `$${filter.params.length + 1}`;
      const distance = `(i.embedding::halfvec(${dimensions}) <=> ${q}::real[]::halfvec(${dimensions}))`;
      const { rows } = await db.query<{ item_id: string; t: string; d: number }>(
        `SELECT ${CANDIDATE_COLUMNS}, ${distance} AS d FROM search.items i WHERE ${filter.where}
          ORDER BY ${distance} LIMIT $${filter.params.length + 2}`,
        [...filter.params, Array.from(vector), k]);
      return rows.map((r) => ({ item_id: r.item_id, t: Number(r.t), similarity: 1 - Number(r.d) })).sort(byRank);
    },
    upsert: () => {},
    remove: () => {},
    async rebuild() {
      // PostgreSQL keeps the HNSW index in step with the table; nothing to rebuild from here.
    },
    status: () => ({ backend: 'pgvector', state: 'ready' }),
    close: async () => {},
  };
}
