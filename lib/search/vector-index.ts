/**
 * The `VectorIndex` of the search service: nearest neighbours of a query vector among the rows of
 * `search.items` that pass a candidate filter (SQL), with two implementations chosen at start
 * (lib/search/engine.ts, reported by /ready):
 * - pgvector: the HNSW index inside PostgreSQL (this file);
 * - usearch: an in-process HNSW index kept by the search service (lib/search/usearch-index.ts).
 * The index's similarities are approximate (graph search on bf16 vectors, half-precision query
 * vectors in pgvector): they only choose candidates, whose exact similarities (from the stored
 * binary16 embeddings, read with the filter's check) rank them, then newest, then item id (spec tie rule).
 * `exactNearest` is the exact path both share (few rows, or an index not ready).
 */
import { cosineToHalf } from './half.ts';
import { hnswSettings, type VectorBackendName, type SqlRunner } from './vector-backend.ts';
import type { GraphUpkeep } from './pgvector-graph.ts';

/** A row near the query vector: exact cosine similarity; `t` = created_at in microseconds since 1970. */
export interface Neighbour {
  item_id: string;
  similarity: number;
  t: number;
  /** The values of the filter's `flags` for this row, in their order, when it has some. */
  flags?: boolean[];
}

/**
 * A condition over the row alias `i` of `search.items` with its parameters ($1..$n in `where`).
 * It must include `lifecycle_status = 'live'` and the model-version condition (sameModelSql).
 */
export interface CandidateFilter {
  where: string;
  params: unknown[];
  /**
   * Boolean SQL expressions over `i` (with these params) returned with each candidate (as columns
   * `f0`, `f1`, …; Neighbour.flags), so that a caller learns them from the same statement (e.g.
   * which candidates are lexical matches, which pass a request's filters and places).
   */
  flags?: string[];
}

/** What `VectorIndex.search` found. */
export interface IndexAnswer {
  found: Neighbour[];
  complete: boolean;
}

/**
 * How far below `minSimilarity` an index's approximate similarity may be and its candidate still be
 * checked exactly: binary16 stored vectors move a cosine by ~1e-3, a bf16 graph (usearch) by a few
 * 1e-3, a halfvec query (pgvector) likewise.
 */
export const SIMILARITY_MARGIN = 0.02;

export interface VectorIndex {
  readonly backend: VectorBackendName;
  /** Whether the index can answer now (false while the in-process index is built: callers use exactNearest). */
  ready(): boolean;
  /** Vectors indexed (pgvector: the live rows of the model version). */
  size(db: SqlRunner): Promise<number>;
  /**
   * Up to `k` nearest rows passing `filter` (and, with `minSimilarity`, whose similarity reaches
   * it), ranked by their exact similarity (the cosine of the stored binary16 vectors, read with the
   * check of the filter) then newest, then item id descending. The index's own (approximate)
   * order only chooses the candidates. `complete`: no other row can be among them — the search
   * went below `minSimilarity` (with SIMILARITY_MARGIN) or saw every vector. Otherwise it may
   * return fewer than `k` although more rows pass (widening stopped at its budget); the caller
   * then takes the exact path.
   */
  search(db: SqlRunner, vector: Float32Array, k: number, filter: CandidateFilter, minSimilarity?: number): Promise<IndexAnswer>;
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

/**
 * Columns a neighbour needs (row alias `i`): `e` the stored embedding as big-endian binary16
 * (lib/search/half.ts) in base64 — a third shorter than bytea's hex output, which cost PostgreSQL
 * ~0.6 ms more to write and this process ~0.3 ms more to read per 210 rows (measured).
 */
export const NEIGHBOUR_COLUMNS = `i.item_id::text AS item_id, (extract(epoch FROM i.created_at) * 1000000)::int8 AS t,
  encode(search.embedding_f16(i.embedding), 'base64') AS e`;
/** NEIGHBOUR_COLUMNS without the vector (for an index that holds the stored vectors itself: usearch). */
export const NEIGHBOUR_ID_COLUMNS = `i.item_id::text AS item_id, (extract(epoch FROM i.created_at) * 1000000)::int8 AS t`;

/** The columns `f0`, `f1`, … of the filter's `flags` (with a leading comma), or nothing. */
export const flagColumns = (filter: CandidateFilter) => (filter.flags ?? []).map((f, n) => `, (${f}) AS f${n}`).join('');

/** A row's values of the filter's `flags` (columns of flagColumns), as Neighbour.flags, or nothing. */
export const flagsOf = (filter: CandidateFilter, row: Record<string, unknown>): { flags?: boolean[] } =>
  (filter.flags?.length ? { flags: filter.flags.map((_, n) => row[`f${n}`] as boolean) } : {});

/** NEIGHBOUR_COLUMNS and the filter's `flags`, if any. */
export const neighbourColumns = (filter: CandidateFilter) => `${NEIGHBOUR_COLUMNS}${flagColumns(filter)}`;

/**
 * Neighbours from rows of neighbourColumns(filter): exact similarities, ordered by rank. The cosine, not
 * the dot product: stored vectors are unit length only to half precision (~1e-4).
 */
export function rankRows(vector: Float32Array, rows: { item_id: string; t: string | number | bigint; e: string }[], filter: CandidateFilter): Neighbour[] {
  return rows.map((r) => ({
    item_id: r.item_id, t: Number(r.t), similarity: cosineToHalf(vector, Buffer.from(r.e, 'base64')), ...flagsOf(filter, r),
  })).sort(byRank);
}

/**
 * The exact path: every row passing `filter`, its cosine computed from the stored embedding, the
 * first `k` by rank. Cost grows with the rows passing (about 1 µs per dimension per thousand rows
 * plus the transfer), so callers use it when the filter leaves few rows.
 */
export async function exactNearest(db: SqlRunner, vector: Float32Array, k: number, filter: CandidateFilter): Promise<Neighbour[]> {
  const { rows } = await db.query(`SELECT ${neighbourColumns(filter)} FROM search.items i WHERE ${filter.where}`, filter.params);
  return rankRows(vector, rows, filter).slice(0, k);
}

/** Candidates the graph is asked for at most by one search, widening (pgvectorIndex). */
export const MAX_GRAPH_CANDIDATES = 4000;

/**
 * The pgvector implementation (the server path). One statement reads two parts: the graph, through
 * the HNSW index of the current generation (`ORDER BY embedding::halfvec(n) <=> query` alone, no
 * tiebreaker, so that the index serves it, under `hnsw.iterative_scan = strict_order`: the rows
 * come by distance), and the tail, the rows written since (lib/search/pgvector-graph.ts), ordered
 * by their exact distance (few rows, through the index on ann_gen). The generation is read with
 * the settings (hnswSettings), in the same transaction. The rows are ranked by exact similarity.
 * With `minSimilarity`, the graph is asked for more (4x, up to MAX_GRAPH_CANDIDATES) while fewer
 * than `k` rows reach it and its last candidate is within SIMILARITY_MARGIN of it: the answer is
 * complete once a candidate falls below, judged without reading every row.
 * `upkeep`: the search service's upkeep of the graph, for status().
 */
export function pgvectorIndex(dimensions: number, upkeep?: GraphUpkeep): VectorIndex & { upkeep?: GraphUpkeep } {
  return {
    backend: 'pgvector',
    upkeep,
    ready: () => true,
    async size(db) {
      const { rows: [row] } = await db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM search.items WHERE model_dimensions = ${dimensions} AND lifecycle_status = 'live'`);
      return row.n;
    },
    async search(db, vector, k, filter, minSimilarity) {
      const { rows: [{ g }] } = await db.query<{ g: number }>(
        `SELECT ${hnswSettings(k, minSimilarity !== undefined)}, (SELECT value::int FROM search.settings WHERE key = 'ann_graph_gen') AS g`);
      const n = filter.params.length;
      const distance = `(i.embedding::halfvec(${dimensions}) <=> $${n + 1}::real[]::halfvec(${dimensions}))`;
      const part = (graph: boolean, limit: string) => `(SELECT ${neighbourColumns(filter)}, ${distance} AS d, ${graph} AS graph
          FROM search.items i WHERE ${filter.where} AND i.ann_gen ${graph ? '<=' : '>'} ${Number(g)} ORDER BY ${distance} LIMIT ${limit})`;
      type Row = { item_id: string; t: string; e: string; d: number; graph: boolean };
      const params = [...filter.params, Array.from(vector)];
      const { rows } = await db.query<Row>(`${part(true, `$${n + 2}`)} UNION ALL ${part(false, `$${n + 3}`)}`, [...params, k, k]);
      const tail = rows.filter((r) => !r.graph);
      let graph = rows.filter((r) => r.graph);
      const passing = () => {
        const found = rankRows(vector, [...graph, ...tail], filter);
        return minSimilarity === undefined ? found : found.filter((f) => f.similarity >= minSimilarity);
      };
      // Graph rows come by distance: one below the margin means every later one is too.
      const below = () => minSimilarity !== undefined && graph.length > 0 && 1 - Number(graph.at(-1)!.d) < minSimilarity - SIMILARITY_MARGIN;
      let found = passing();
      for (let limit = k; found.length < k && !below() && minSimilarity !== undefined && graph.length === limit && limit < MAX_GRAPH_CANDIDATES;) {
        limit = Math.min(MAX_GRAPH_CANDIDATES, limit * 4);
        await db.query(`SELECT ${hnswSettings(limit, true)}`);
        graph = (await db.query<Row>(part(true, `$${n + 2}`), [...params, limit])).rows;
        found = passing();
      }
      return { found: found.slice(0, k), complete: below() };
    },
    async rebuild() {
      // The upkeep builds a new generation when the tail is large; nothing to rebuild from here.
    },
    status: () => ({ backend: 'pgvector', ...(upkeep?.status() ?? { state: 'ready', upkeep: 'not started' }) }),
    close: async () => {},
  };
}
