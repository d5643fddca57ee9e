/**
 * The search core behind `POST /v1/search` and `/v1/search/flat` (spec "Search service"; the
 * decisions of the issue and docs/decisions.md):
 * - scope: items of `context.networkId` / `domain` / `itemType` that are live; the anchor itself is
 *   never a result; every condition is ANDed;
 * - `textSearch` narrows (issue 14, docs/decisions.md): an item matches when every word of the
 *   text is a word of its searchable text (full-text index, `simple` configuration), or when it is among the
 *   VECTOR_MATCH_LIMIT nearest neighbours of the text's embedding within the scope and filters and
 *   its cosine similarity reaches the provider's threshold (served by the vector index); the
 *   text's embedding ranks unless an anchor supplies the ranking vector;
 * - anchor `item.id`: indexed in the same network (404), the interaction matrix lets its domain
 *   reach `context.domain` (403); its embedding ranks and its first location can be the centre;
 * - `spatial` s_dwithin filters (any location within range, bounding-box prefilter on the GiST
 *   index; with text, the grid cells of the first place's box on the words' GIN index,
 *   sql/019_search_geo_cells.sql); `orderingCenter` only orders;
 * - order: `sort`, else relevance with a ranking vector, else nearest with a centre
 *   (orderingCenter, the first s_dwithin point, the anchor's location), else newest; an order
 *   whose precondition is unmet degrades to newest; ties fall back to newest, then item id;
 * - `score` is the cosine similarity to the ranking vector, `distanceMeters` the distance from the
 *   centre (nearest order) or the first s_dwithin point to the item's nearest location;
 * - `meta.total` is exact up to TOTAL_EXACT_BOUND (and past it when the page collected every
 *   match); past it, an estimate (the planner's, or extrapolated from where the counted rows lie:
 *   countRows), flagged `meta.total_estimated: true`; every page is complete;
 * - no row past MAX_PAGE_DEPTH (offset + limit, lib/network/page-depth.ts) is returned: a deeper page is
 *   cut there, and one starting past it is empty without the index or a table being walked.
 * Nearest neighbours come from the engine's VectorIndex (lib/search/vector-index.ts) when it is
 * ready and the candidates are many, else from the exact path.
 * Relevance compares only vectors of the provider's model version: during a re-index after a model
 * change, items not yet re-embedded cannot be ranked (or matched by similarity) until they are.
 */
import type { EmbeddingProvider } from './embeddings/index.ts';
import { cosineSimilarity, sameModelVersion } from './embeddings/index.ts';
import type { ItemRecord } from '../network/items.ts';
import { rowsWithinDepth } from '../network/page-depth.ts';
import { interactionAllowed, type Network } from '../network/config.ts';
import { filterSql, resolveFilter, type ResolvedFilter } from './filters.ts';
import { boundingBox, fromCoordinates, type GeoPoint } from '../network/geo.ts';
import { DEFAULT_LIMIT, DEFAULT_VERSION, SearchError, type SearchBody, type SortOrder } from './request.ts';
import { decodeHalf } from './half.ts';
import { coverCells } from './geo-cells.ts';
import { LRUCache } from 'lru-cache';
import { ReadCache } from '../platform/read-cache.ts';
import { sameModelSql, type SqlRunner, type VectorBackendName } from './vector-backend.ts';
import { byRank, bytesOf, exactNearest, type CandidateFilter, type Neighbour, type VectorIndex } from './vector-index.ts';

/** Nearest neighbours of a text's embedding that can match it by similarity (see the file's rules). */
export const VECTOR_MATCH_LIMIT = 200;
/** `meta.total` is counted exactly up to this many rows; past it, estimated. */
export const TOTAL_EXACT_BOUND = 1000;
/** A planner estimate past this many times the exact bound is taken without counting (countRows). */
export const ESTIMATE_OVER = 5;
/** Newest or nearest pages of at most this many matches are collected and sorted rather than walked in index order. */
export const COLLECT_MAX = 10_000;
/** Candidate sets of at most this many rows are ranked exactly rather than through the index. */
export const EXACT_MAX_ROWS = 1000;
/**
 * Candidates asked of the vector index beyond the page, ranked exactly with it: approximate index
 * distances reorder the many near-equal texts of real data (recall@20 0.89 with 10 on the PMGSY file).
 */
const REFINE_MARGIN = 100;
/**
 * A page of a text's similar items also ranks the text's lexical matches that are not among them,
 * when the count read them and they are at most this many: the vector index is approximate, and a
 * lexical match it missed (a small cluster of near-identical texts its graph does not reach, e.g.
 * the eleven "community hall"s of the first 50,000 PMGSY rows) can be more similar than the items
 * it found (recall@20 of that text 9/20 before, docs/decisions.md "Self-hosting II").
 */
export const LEXICAL_RANKED_MAX = 250;

/** Everything a search needs; built once per process (lib/search/engine.ts) or per test. */
export interface SearchEngine {
  network: Network;
  backend: VectorBackendName;
  provider: EmbeddingProvider;
  /** Runs `fn` on one connection (in a transaction where the backend needs one: pgvector's settings). */
  transaction<T>(fn: (db: SqlRunner) => Promise<T>): Promise<T>;
  /** The embedding of a query text (cached). */
  embedText(text: string): Promise<Float32Array>;
  /** The vector index when it can answer now; undefined while it is built (exact path). */
  vectorIndex(): VectorIndex | undefined;
  /** Candidate sets up to this size are ranked exactly (default EXACT_MAX_ROWS). */
  exactMaxRows?: number;
  /** meta.total is exact up to this many rows (default TOTAL_EXACT_BOUND). */
  totalExactBound?: number;
  /** How a text search within a place reads its lexical matches (default: `cells` when the place has a cover, else placeReadPlan's choice; tests force each). */
  placeRead?: PlaceRead;
}

/** A result: the item record with `lifecycle_status`, and `score` / `distanceMeters` when they apply. */
export type SearchItem = ItemRecord & { score?: number; distanceMeters?: number };

export interface SearchResponse {
  context: Record<string, unknown> & { version: string };
  message: { items: SearchItem[]; meta: { total: number; total_estimated?: true; limit: number; offset: number; sort_applied: SortOrder } };
}

/** Lower-cased words of a text search (letters and digits). */
export function textTerms(text: string): string[] {
  return [...new Set(text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? [])];
}

const RESULT_COLUMNS = `i.item_network, i.item_domain, i.item_type, i.item_id::text AS item_id, i.item_state, i.item_locations,
  i.item_instance_url, i.item_schema_url, i.created_by,
  to_char(i.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS created_at,
  to_char(i.source_updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS updated_at,
  i.lifecycle_status`;

/**
 * A row's own locations (alias `i`) as rows `l(lat, lng)`, read from its `item_locations` jsonb
 * rather than from `search.item_locations`: the indexer writes that table from the same jsonb in
 * the same statement, with the same conversion (`(location ->> 'lat')::float8`, which
 * jsonb_to_recordset also applies: float8's input of the number's text), so the values are the
 * same, and a row already read needs no index probe (~1 µs a row less: 14.9 → 11.4 ms of
 * PostgreSQL CPU for the 3,616 text matches of a combined search, docs/decisions.md 2026-11-25).
 */
const OWN_LOCATIONS = `jsonb_to_recordset(i.item_locations) AS l(lat float8, lng float8)`;

interface Anchor {
  id: string;
  vector?: Float32Array;
  location?: GeoPoint;
}

/** Scope and filters checked against the network. @throws SearchError 400 naming every bad field. */
function checkScope(network: Network, body: SearchBody): { filters: ResolvedFilter[] } {
  const { context, message } = body;
  const fields: Record<string, string[]> = {};
  const problem = (path: string, text: string) => (fields[path] ??= []).push(text);
  if (context.networkId !== network.id) problem('context.networkId', `must be ${network.id}`);
  const domain = network.domains.get(context.domain);
  if (!domain) problem('context.domain', `must be one of ${[...network.domains.keys()].join(', ')}`);
  else if (context.itemType !== domain.itemType) problem('context.itemType', `${domain.name} items are of type ${domain.itemType}`);
  const filters: ResolvedFilter[] = [];
  if (domain) {
    (message.intent.filters ?? []).forEach((f, index) => {
      const resolved = resolveFilter(domain, f);
      if ('error' in resolved) problem(`message.intent.filters.${index}.${resolved.on}`, resolved.error);
      else filters.push(resolved);
    });
  }
  if (Object.keys(fields).length) {
    const summary = Object.entries(fields).map(([k, v]) => `${k}: ${v.join(', ')}`).join('; ');
    throw new SearchError(400, 'invalid_request', `Invalid request body: ${summary}`, fields);
  }
  return { filters };
}

/** The anchor item, checked. @throws SearchError 404 (not indexed in the network) or 403 (interaction). */
async function loadAnchor(db: SqlRunner, network: Network, body: SearchBody, provider: EmbeddingProvider, id: string): Promise<Anchor> {
  const { rows: [row] } = await db.query<{
    item_network: string; item_domain: string; model_id: string; model_quantization: string; model_dimensions: number;
    e: Uint8Array; lat: number | null; lng: number | null;
  }>(
    `SELECT i.item_network, i.item_domain, i.model_id, i.model_quantization, i.model_dimensions, search.embedding_f16(i.embedding) AS e, l.lat, l.lng
       FROM search.items i LEFT JOIN search.item_locations l ON l.item_id = i.item_id AND l.position = 0
      WHERE i.item_id = $1`, [id]);
  if (!row || row.item_network !== body.context.networkId) {
    throw new SearchError(404, 'anchor_not_found', `Anchor item ${id} is not indexed in network ${body.context.networkId}`);
  }
  const to = { network: body.context.networkId, domain: body.context.domain };
  if (!interactionAllowed(network, { network: row.item_network, domain: row.item_domain }, to)) {
    throw new SearchError(403, 'interaction_not_allowed',
      `The interaction matrix does not let ${row.item_network}/${row.item_domain} items reach ${to.network}/${to.domain}`);
  }
  const comparable = sameModelVersion(
    { model_id: row.model_id, quantization: row.model_quantization, dimensions: row.model_dimensions }, provider.version);
  return {
    id,
    vector: comparable ? decodeHalf(bytesOf(row.e)) : undefined,
    location: row.lat !== null && row.lng !== null ? { lat: row.lat, lng: row.lng } : undefined,
  };
}

/** The order actually used (spec rules 2 and 4). */
export function sortApplied(requested: SortOrder | undefined, hasRanking: boolean, hasCentre: boolean): SortOrder {
  if (requested === 'relevance') return hasRanking ? 'relevance' : 'newest';
  if (requested === 'nearest') return hasCentre ? 'nearest' : 'newest';
  if (requested === 'newest') return 'newest';
  return hasRanking ? 'relevance' : hasCentre ? 'nearest' : 'newest';
}

/** A SQL condition over alias `i`, written with `p` (adds a parameter, returns its placeholder). */
type Cond = (p: (value: unknown) => string) => string;

/** The conditions as one WHERE with their own parameters ($1..$n). */
function filterOf(conds: Cond[]): CandidateFilter {
  const params: unknown[] = [];
  const p = (value: unknown) => `$${params.push(value)}`;
  return { where: conds.map((c) => `(${c(p)})`).join(' AND ') || 'true', params };
}

/**
 * A statement selecting `i.item_id` and `i.ctid` of rows of `search.items i` (without LIMIT),
 * written with `p`.
 */
type Rows = (p: (value: unknown) => string) => string;

/** The rows passing `conds`, as the planner chooses to read them. */
const rowsOf = (conds: Cond[]): Rows => (p) => `SELECT i.item_id, i.ctid FROM search.items i WHERE ${conds.map((c) => `(${c(p)})`).join(' AND ') || 'true'}`;

/**
 * Rows of `rows`, read up to `bound`: how many, and their ids with `withIds`; when there are
 * more, `over`: how many there are, extrapolated from where the first `bound` + 1 were found.
 * A bitmap or sequential scan reads the table in physical order, so if those rows lie in its first
 * `k` of `pages` pages, about (`bound` + 1) × `pages` / `k` pass (the planner's estimates of
 * multi-word texts were up to 280 times too low on the full PMGSY file). Matches clustered in the
 * table skew it: early ones (an upload of one region) make it too high, which countRows caps, late
 * ones too low. Never less than `bound` + 1; a read in another order (place-first) only
 * underestimates.
 */
async function boundedCount(db: SqlRunner, rows: Rows, bound: number, withIds: boolean): Promise<{ n: number; ids?: string[] } | { over: number }> {
  const params: unknown[] = [];
  const select = `${rows((value) => `$${params.push(value)}`)} LIMIT ${bound + 1}`;
  // `last`: the block of the last row read (a tid's text "(block,offset)" read as a point);
  // `pages`: the table's blocks now (its statistics may be older).
  const pages = `(pg_relation_size('search.items') / current_setting('block_size')::int)::int8`;
  const { rows: [row] } = await db.query<{ n: number; ids: string[] | null; last: number | null; pages: number }>(
    `SELECT count(*)::int AS n, ${withIds ? 'array_agg(item_id::text)' : 'NULL::text[]'} AS ids,
            ((max(ctid)::text::point)[0])::int8 AS last, ${pages} AS pages FROM (${select}) s`, params);
  if (row.n <= bound) return withIds ? { n: row.n, ids: row.ids ?? [] } : { n: row.n };
  return { over: Math.max(bound + 1, Math.round(((bound + 1) * row.pages) / ((row.last ?? 0) + 1))) };
}

/**
 * A branch of a UNION ALL whose EXPLAIN estimate is the rows of `search.items i` holding `word`
 * and passing `conds`, written with `p`. current_schema() is parallel-unsafe: the plan stays
 * serial, so each branch is one node of the Append with its whole estimate (a parallel plan
 * divides them among workers).
 */
function wordBranch(word: string, p: (value: unknown) => string, conds: Cond[] = []): string {
  return `SELECT current_schema() FROM search.items i WHERE ${[...conds.map((c) => `(${c(p)})`), `i.search_words @@ to_tsquery('simple', ${p(word)})`].join(' AND ')}`;
}

/** The top node's estimated rows of an EXPLAIN (FORMAT JSON) answer, and its children's. */
async function planRows(db: SqlRunner, sql: string, params: unknown[]): Promise<{ rows: number; children: number[] }> {
  const { rows: [row] } = await db.query<{ 'QUERY PLAN': unknown }>(`EXPLAIN (FORMAT JSON) ${sql}`, params);
  const plan = (typeof row['QUERY PLAN'] === 'string' ? JSON.parse(row['QUERY PLAN']) : row['QUERY PLAN']) as [{ Plan: PlanNode }];
  return { rows: Number(plan[0].Plan['Plan Rows']), children: (plan[0].Plan.Plans ?? []).map((c) => Number(c['Plan Rows'])) };
}
interface PlanNode { 'Plan Rows': number; Plans?: PlanNode[] }

/**
 * The planner's estimate of the rows passing `conds` (EXPLAIN; from the column statistics and the
 * stored words' statistics: most common words), at least `floor`.
 */
async function estimateCount(db: SqlRunner, conds: Cond[], floor: number): Promise<number> {
  const f = filterOf(conds);
  const { rows } = await planRows(db, `SELECT 1 FROM search.items i WHERE ${f.where}`, f.params);
  return Math.max(floor, Math.round(rows));
}

/**
 * Rows passing `conds`: counted exactly when at most `bound` (`ids` with `withIds`: the rows read,
 * so that the page need not evaluate the conditions again), else an estimate (`estimated`): the
 * planner's, or when the count went past the bound the larger of it and boundedCount's, at most
 * `upper()` (an upper bound asked then: a text's rarest word, whose estimate the planner gets
 * right, caps an extrapolation from matches clustered early in the table). The
 * estimate comes first (planning only, no row read): when it exceeds ESTIMATE_OVER × `bound` it is
 * the answer, since counting up to the bound would read `bound` rows for nothing (~1,000 heap
 * rows: 2-12 ms of PostgreSQL on the full PMGSY file); a planner that overestimates that much turns an exact
 * total into a flagged estimate, never the reverse. `read`: how to read the same rows when they are
 * counted (chosen then; the planner's own way by default). `overBound`: where the row sets found
 * over the bound are remembered, and asked first (OverBound).
 */
async function countRows(db: SqlRunner, conds: Cond[], bound: number,
  options: { withIds?: boolean; read?: () => Promise<Rows>; overBound?: OverBound; upper?: () => Promise<number> } = {}): Promise<{ n: number; estimated: boolean; ids?: string[] }> {
  const key = options.overBound && JSON.stringify(filterOf(conds));
  const known = key && options.overBound!.get(key);
  if (known) return { n: known, estimated: true };
  const guess = await estimateCount(db, conds, 0);
  if (guess > bound * ESTIMATE_OVER) return { n: guess, estimated: true };
  const rows = options.read ? await options.read() : rowsOf(conds);
  const counted = await boundedCount(db, rows, bound, options.withIds ?? false);
  if (!('over' in counted)) return { ...counted, estimated: false };
  // An upper bound below what was just counted is wrong (a word missing from stale statistics).
  const upper = options.upper ? await options.upper() : Infinity;
  const n = Math.max(bound + 1, Math.min(Math.max(guess, counted.over), upper > bound ? upper : Infinity));
  if (key) options.overBound!.set(key, n);
  return { n, estimated: true };
}

/**
 * Row sets (their conditions' SQL and parameters) that a bounded count found larger than the
 * bound, with the estimate answered then: for OVER_BOUND_MAX_AGE_MS the same conditions get that
 * estimate again without reading `bound` rows for nothing. The planner underestimates multi-word
 * texts (independent words: "primary health centre" 16 rows, 3,617 counted on the full PMGSY
 * file), so every page of such a text read ~1,000 rows (2-5 ms of PostgreSQL) only to give the
 * estimate. Only a flagged estimate is reused: a total at most the bound is counted every time,
 * so writes show in exact totals at once; a row set shrinking below the bound is counted again
 * at most OVER_BOUND_MAX_AGE_MS later. Per search engine (process), lru-cache with a TTL.
 */
type OverBound = LRUCache<string, number>;
const OVER_BOUND_MAX_AGE_MS = 30_000;
const overBounds = new WeakMap<SearchEngine, OverBound>();
function overBoundOf(engine: SearchEngine): OverBound {
  let cache = overBounds.get(engine);
  if (!cache) overBounds.set(engine, cache = new LRUCache<string, number>({ max: 1000, ttl: OVER_BOUND_MAX_AGE_MS }));
  return cache;
}

/** The rows whose vectors compare with `provider`'s (its model version). */
const sameModelOf = (provider: EmbeddingProvider): Cond => (p) =>
  sameModelSql('i', provider.version, { id: p(provider.version.model_id), quantization: p(provider.version.quantization) });

/** A text search's scope: its live items of a network, domain and item type, as a condition and a key. */
interface TextScope { cond: Cond; key: string }

function textScopeOf(network: string, domain: string, itemType: string): TextScope {
  return {
    cond: (p) => `i.item_network = ${p(network)} AND i.item_domain = ${p(domain)} AND i.item_type = ${p(itemType)} AND i.lifecycle_status = 'live'`,
    key: JSON.stringify([network, domain, itemType]),
  };
}

/** How long a scope's row count is reused (ms): it only chooses between the exact path and the index. */
const SCOPE_ROWS_MAX_AGE_MS = 5000;
const scopeRowCaches = new WeakMap<SearchEngine, ReadCache<{ n: number; estimated: boolean }>>();

/**
 * The rows of a text search's scope comparable with the provider's model, as countRows answers up
 * to the engine's exact bound (EXACT_MAX_ROWS), reused per scope for up to SCOPE_ROWS_MAX_AGE_MS (lib/platform/read-cache.ts; read on
 * a connection of its own). The count only decides whether the similar items come from the exact
 * path or from the vector index, and both give the same answer (the index falls back to the exact
 * path when it cannot fill the page), so a count some seconds old changes no result; it saves every
 * text search a statement (~0.3 ms of this process's socket writes and parsing, and PostgreSQL's
 * planning). Called before the request takes its connection: a read waited for takes one of its own.
 */
async function scopeRows(engine: SearchEngine, scope: TextScope): Promise<{ n: number; estimated: boolean }> {
  let cache = scopeRowCaches.get(engine);
  if (!cache) {
    const sameModel = sameModelOf(engine.provider);
    const bound = engine.exactMaxRows ?? EXACT_MAX_ROWS;
    cache = new ReadCache({
      maxAgeMs: SCOPE_ROWS_MAX_AGE_MS, max: 100,
      read: (key) => {
        const [network, domain, itemType] = JSON.parse(key) as string[];
        return engine.transaction((db) => countRows(db, [textScopeOf(network, domain, itemType).cond, sameModel], bound));
      },
    });
    scopeRowCaches.set(engine, cache);
  }
  return (await cache.get(scope.key))!;
}

/**
 * CPU per row read (µs) of the three ways to read a text search's lexical matches within a place
 * when grid cells cannot (placeRows: the place's box crosses the antimeridian, reaches a pole or
 * needs more than MAX_COVER_CELLS cells at every level, lib/search/geo-cells.ts),
 * measured on the full PMGSY file (bounded counts of the benchmark's combined searches, CPU time of
 * the PostgreSQL backend; docs/decisions.md, 2026-11-25):
 * - `text-first`: the text's matches through the full-text index, each one's locations checked:
 *   ~5 per text match, measured when they were probed through item_locations' primary key (~1
 *   less since they are read from the row itself, OWN_LOCATIONS; a cost of 4 chose no better);
 * - `hashed`: the same matches checked against a hash of every location near the point: ~1.5 per
 *   location in the place's bounding box and ~1.5 per text match;
 * - `place-first`: the locations near the point, each one's item probed (items' primary key) and
 *   its stored words checked: ~4.5 per location in the box.
 */
const READ_COST = { textFirst: 5, hashedPerLocation: 1.5, hashedPerMatch: 1.5, placeFirst: 4.5 };

/**
 * A way to read a text search's lexical matches within a place: `cells` (the words and the place's
 * grid cells intersected in the GIN index, then each row's places checked; lib/search/geo-cells.ts),
 * or one of READ_COST's three.
 */
export type PlaceRead = 'cells' | 'text-first' | 'hashed' | 'place-first';

/**
 * How to read a text search's lexical matches within a place without grid cells, from the
 * planner's estimates of the locations in the place's bounding box (`locations`) and of the rarest
 * word's rows (`rarest`): the cheapest by READ_COST. The planner cannot choose well itself: it
 * multiplies the words' frequencies, although the words of real texts go together ("primary
 * health centre": estimated 13 for 3,617), and it estimates any box at 0.1 % of the locations. The rarest word's rows bound the
 * text's; half of them is the expected share (median 0.45 over the benchmark's texts).
 */
export function placeReadPlan(rarest: number, locations: number): Exclude<PlaceRead, 'cells'> {
  const matches = rarest / 2;
  const costs = {
    'text-first': READ_COST.textFirst * matches,
    hashed: READ_COST.hashedPerLocation * locations + READ_COST.hashedPerMatch * matches,
    'place-first': READ_COST.placeFirst * locations,
  } as const;
  return (Object.keys(costs) as (keyof typeof costs)[]).reduce((a, b) => (costs[b] < costs[a] ? b : a));
}

/**
 * Answers a validated `/v1/search` body.
 * @throws SearchError 400 (scope or filters), 404 / 403 (anchor).
 */
export async function runSearch(engine: SearchEngine, body: SearchBody): Promise<SearchResponse> {
  const { network, provider } = engine;
  const { context, message: { intent, pagination } } = body;
  const limit = pagination?.limit ?? DEFAULT_LIMIT;
  const offset = pagination?.offset ?? 0;
  // The rows of the page within MAX_PAGE_DEPTH: none past it, however deep the offset.
  const take = rowsWithinDepth(offset, limit);
  const depth = offset + take;
  const exactMax = engine.exactMaxRows ?? EXACT_MAX_ROWS;
  const totalBound = engine.totalExactBound ?? TOTAL_EXACT_BOUND;
  const { filters } = checkScope(network, body);

  const terms = textTerms(intent.textSearch ?? '');
  // Before a connection is taken: a model call can take a while, and a scope count waited for
  // takes a connection of its own (scopeRows).
  const textVector = terms.length ? await engine.embedText(intent.textSearch!.trim()) : undefined;
  const textScope = textScopeOf(context.networkId, context.domain, context.itemType);
  const inScope = textVector && await scopeRows(engine, textScope);
  const index = engine.vectorIndex();

  return engine.transaction(async (db) => {
    const anchor = intent.item ? await loadAnchor(db, network, body, provider, intent.item.id) : undefined;
    const spatial = (intent.spatial ?? []).map((s) => ({ point: fromCoordinates(s.geometry.coordinates), meters: s.distanceMeters }));
    const ranking = anchor?.vector ? anchor.vector : textVector;
    const centre = intent.orderingCenter ? fromCoordinates(intent.orderingCenter.coordinates) : spatial[0]?.point ?? anchor?.location;
    const sort = sortApplied(intent.sort, ranking !== undefined, centre !== undefined);
    const distanceFrom = sort === 'nearest' ? centre : spatial[0]?.point;
    const relevance = sort === 'relevance';

    // The scope, filters and places; then the rows whose vectors compare with the query's.
    // `per-row`: each place checked on each row, on the row's own locations (OWN_LOCATIONS),
    // rather than as EXISTS over search.item_locations, which PostgreSQL plans as a semi-join or a
    // hashed sub-plan over every location near the point (~3,000 within 50 km, ~3-4 ms) even when
    // the statement names only a few hundred rows by id (measured 4.4 → 1.7 ms for 200). `hashed`: the
    // first place as a hash of the locations near its point, `skip-first`: without the first place
    // (read by the statement itself; placeRows). Same conditions.
    const within = (s: (typeof spatial)[number], p: (value: unknown) => string) => {
      const box = boundingBox(s.point, s.meters);
      return `point(l.lng, l.lat) <@ box(point(${p(box.minLng)}, ${p(box.minLat)}), point(${p(box.maxLng)}, ${p(box.maxLat)}))
          AND search.distance_m(${p(s.point.lat)}, ${p(s.point.lng)}, l.lat, l.lng) <= ${p(s.meters)}`;
    };
    const scopeOf = (places: 'exists' | 'per-row' | 'hashed' | 'skip-first'): Cond => (p) => {
      const where = [
        `i.item_network = ${p(context.networkId)}`, `i.item_domain = ${p(context.domain)}`, `i.item_type = ${p(context.itemType)}`,
        `i.lifecycle_status = 'live'`,
      ];
      if (anchor) where.push(`i.item_id <> ${p(anchor.id)}::uuid`);
      for (const f of filters) where.push(filterSql(f, 'i', p));
      spatial.forEach((s, n) => {
        if (n === 0 && places === 'skip-first') return;
        // Under OR, PostgreSQL keeps the IN as a (hashed) sub-plan instead of turning it into a join
        // it would order by its own estimates; OR false changes nothing else.
        if (n === 0 && places === 'hashed') where.push(`(i.item_id IN (SELECT l.item_id FROM search.item_locations l WHERE ${within(s, p)}) OR false)`);
        else if (places === 'per-row') where.push(`EXISTS (SELECT 1 FROM ${OWN_LOCATIONS} WHERE ${within(s, p)})`);
        else where.push(`EXISTS (SELECT 1 FROM search.item_locations l WHERE l.item_id = i.item_id AND ${within(s, p)})`);
      });
      return where.join('\n AND ');
    };
    const scope = scopeOf('exists');
    const sameModel = sameModelOf(provider);
    const comparable = [scope, sameModel];
    /**
     * The rows `ids` (read by an earlier statement of this request under the full conditions)
     * still live (and of the model version, with `model`): evaluating the places, filters and
     * words again per row cost as much as the first time (every row near a point read again).
     */
    const byIds = (ids: string[], model: boolean): Cond[] =>
      [(p) => `i.item_id = ANY(${p(ids)}::uuid[]) AND i.lifecycle_status = 'live'`, ...(model ? [sameModel] : [])];
    // Relevance ranks only vectors comparable with the ranking vector.
    const base = relevance && ranking ? comparable : [scope];

    /**
     * The `k` nearest rows to `vector` passing `conds` (`known`: how many pass, when counted), with
     * exact similarities, at least `minSimilarity` when given. `ids`: the rows passing `conds` when
     * they were read already, which the exact path then ranks. `margin`: candidates asked of the
     * index beyond `k` and ranked exactly with them, so that rows its approximate order puts just
     * below the page can still enter it. `flags`: conditions returned with each row (Neighbour.flags).
     */
    const nearest = async (vector: Float32Array, k: number, conds: Cond[], known: number | undefined,
      options: { ids?: string[]; minSimilarity?: number; margin?: number; flags?: Cond[] } = {}): Promise<Neighbour[]> => {
      const { ids, minSimilarity, margin = 0, flags } = options;
      const withFlag = (f: CandidateFilter): CandidateFilter => (flags ? { ...f, flags: flags.map((c) => c((v) => `$${f.params.push(v)}`)) } : f);
      if (index && (known === undefined || known > exactMax)) {
        const { found, complete } = await index.search(db, vector, k + margin, withFlag(filterOf(conds)), minSimilarity);
        if (complete || found.length >= (known === undefined ? k : Math.min(k, known))) return found.slice(0, k);
      }
      const exact = await exactNearest(db, vector, k, withFlag(filterOf(ids ? byIds(ids, conds.includes(sameModel)) : conds)));
      return minSimilarity === undefined ? exact : exact.filter((n) => n.similarity >= minSimilarity);
    };

    // Text: the lexical condition (full-text index), and the text's nearest neighbours in the scope
    // (network, domain, type; not filters, places or anchor, so one index search serves any of
    // them) whose similarity reaches the threshold (vector index).
    let textMatch: Cond | undefined;
    let lexical: Cond | undefined;
    /** The similar items that pass the scope, filters and places, most similar first. */
    let vectorMatches: Neighbour[] = [];
    let similarNotLexical = 0;
    if (textVector) {
      // Whole words: a prefix (`word:*`) search makes GIN collect every matching entry's postings
      // (4-5x slower for three common words, measured on the full file). The stored words
      // (sql/017_search_words.sql) are compared as they are: no row's text is parsed here.
      const query = terms.join(' & ');
      lexical = (p) => `i.search_words @@ to_tsquery('simple', ${p(query)})`;
      // Which similar items are lexical matches, and which pass the request's scope, filters and
      // places, come with them (`flags`) rather than from a statement of their own (the places
      // checked per row: the candidates are a few hundred rows). Without filters, places or anchor
      // every similar item passes.
      const textOnly = !anchor && !filters.length && !spatial.length;
      const passes: Cond = (p) => base.map((c) => `(${(c === scope ? scopeOf('per-row') : c)(p)})`).join(' AND ');
      const similar = await nearest(textVector, VECTOR_MATCH_LIMIT, [textScope.cond, sameModel], inScope!.estimated ? undefined : inScope!.n,
        { minSimilarity: provider.textThreshold, flags: textOnly ? [lexical] : [lexical, passes] });
      const ids = similar.map((n) => n.item_id);
      vectorMatches = textOnly ? similar : similar.filter((n) => n.flags![1]);
      similarNotLexical = vectorMatches.filter((n) => !n.flags![0]).length;
      textMatch = ids.length ? (p) => `(${lexical!(p)}) OR i.item_id = ANY(${p(ids)}::uuid[])` : lexical;
    }
    const matching = textMatch ? [...base, textMatch] : base;

    // meta.total: |lexical ∪ similar| = |lexical| + |similar but not lexical|, exact up to the bound.
    const counted = textMatch ? [...base, lexical!] : base;
    // The page needs the matches' ids unless it comes from the similar items alone (below).
    const fromSimilar = relevance && ranking === textVector && depth <= vectorMatches.length;
    /**
     * The lexical matches within the first place: by `cells` whenever the place's box has a cover
     * (coverCells: one GIN lookup intersects the text's rows with the cells' rows, and only those
     * rows are read and checked exactly); else (a box across the antimeridian or reaching a pole,
     * or too wide) as placeReadPlan chooses from the planner's estimates of each word's rows and of
     * the locations in the place's box (one EXPLAIN). `engine.placeRead` forces a read (tests).
     */
    const placeRows = async (): Promise<Rows> => {
      const first = spatial[0];
      const box = boundingBox(first.point, first.meters);
      const others = counted.filter((c) => c !== scope);
      // No estimate needed: on the full PMGSY file cells was the cheapest read (or within ~2 ms of
      // it, for rare words within 200 km) for every text of the benchmark, dense and sparse places
      // alike (docs/decisions.md, 2026-11-25), and skipping the EXPLAIN saves a statement. A
      // location within the place is within its box, so its cell is in the cover: the cells only
      // narrow, the per-row check decides.
      const cells = coverCells(box);
      if (cells && (engine.placeRead ?? 'cells') === 'cells') {
        return rowsOf([scopeOf('per-row'), ...others, (p) => `i.geo_cells && ${p(cells)}::int[]`]);
      }
      const params: unknown[] = [];
      const p = (value: unknown) => `$${params.push(value)}`;
      const sources = [...terms.map((t) => wordBranch(t, p)),
        `SELECT current_schema() FROM search.item_locations l
          WHERE l.lat BETWEEN ${p(box.minLat)} AND ${p(box.maxLat)} AND l.lng BETWEEN ${p(box.minLng)} AND ${p(box.maxLng)}`];
      const { children } = await planRows(db, sources.join(' UNION ALL '), params);
      if (children.length !== sources.length) return rowsOf(counted);
      const forced = engine.placeRead !== 'cells' ? engine.placeRead : undefined;
      const plan = forced ?? placeReadPlan(Math.min(...children.slice(0, -1)), children[children.length - 1]);
      if (plan === 'text-first') return rowsOf([scopeOf('per-row'), ...others]);
      if (plan === 'hashed') return rowsOf([scopeOf('hashed'), ...others]);
      // Each item near the point once, then its row (LIMIT 1: a primary key, and a lateral
      // sub-select the planner cannot turn into another join order).
      return (p) => `SELECT i.item_id, i.ctid FROM (SELECT DISTINCT l.item_id FROM search.item_locations l WHERE ${within(first, p)}) n
        CROSS JOIN LATERAL (SELECT i.item_id, i.ctid FROM search.items i WHERE i.item_id = n.item_id
          AND ${[scopeOf('skip-first'), ...others].map((c) => `(${c(p)})`).join(' AND ')} LIMIT 1) i`;
    };
    /**
     * A page in newest or nearest order of the rows passing `conds`, as ids: collected, then sorted
     * (`collect`), or read in the order of an index (the planner's choice under a LIMIT). Up to
     * COLLECT_MAX matches (counted, or estimated) are collected: walking the newest-first index
     * instead reads the whole scope when the matches are all old ones, e.g. the districts of the
     * file's first rows (500 ms against 10 ms, measured). With `count` (collect only), also how
     * many rows pass (`n`), from the same collection.
     */
    const orderedPage = async (conds: Cond[], collect: boolean, count = false): Promise<{ ids: string[]; n?: number }> => {
      const f = filterOf(conds);
      const p = (value: unknown) => `$${f.params.push(value)}`;
      const distance = distanceFrom ? `(SELECT min(search.distance_m(${p(distanceFrom.lat)}, ${p(distanceFrom.lng)}, l.lat, l.lng))
          FROM ${OWN_LOCATIONS})` : 'NULL::float8';
      const order = sort === 'nearest' ? 'dist ASC NULLS LAST, i.created_at DESC, i.item_id DESC' : 'i.created_at DESC, i.item_id DESC';
      const select = `SELECT i.item_id::text AS item_id, i.created_at, ${distance} AS dist FROM search.items i WHERE ${f.where}`;
      if (!collect) {
        const { rows } = await db.query<{ item_id: string }>(`${select} ORDER BY ${order} LIMIT ${p(take)} OFFSET ${p(offset)}`, f.params);
        return { ids: rows.map((r) => r.item_id) };
      }
      // One row: the count and the page's ids in order (ARRAY keeps its sub-select's order).
      const { rows: [row] } = await db.query<{ n: number | null; ids: string[] }>(
        `WITH m AS MATERIALIZED (${select})
         SELECT ${count ? '(SELECT count(*) FROM m)::int' : 'NULL::int'} AS n,
                ARRAY(SELECT i.item_id FROM m AS i ORDER BY ${order} LIMIT ${p(take)} OFFSET ${p(offset)}) AS ids`, f.params);
      return { ids: row.ids, ...(row.n !== null ? { n: row.n } : {}) };
    };

    let tally: { n: number; estimated: boolean; ids?: string[] };
    /** The page's ids when the count collected them (below). */
    let collected: string[] | undefined;
    if (!textMatch && !relevance) {
      // Newest or nearest order without text: the page is collected from every match whenever
      // they are few enough to be counted (the estimate, as countRows asks first), so the same
      // statement counts them and cuts the page (one read of the matches instead of a bounded
      // count, then the page reading them again). The collection reads every match, so its count
      // is exact, past the bound too.
      const guess = await estimateCount(db, counted, 0);
      if (guess > totalBound * ESTIMATE_OVER) tally = { n: guess, estimated: true };
      else {
        const { n, ids } = await orderedPage(counted, true, true);
        tally = { n: n!, estimated: false };
        collected = ids;
      }
    } else {
      // A text of several words matches at most as many rows as its rarest word (with the same
      // scope and filters): the planner's estimate of each word, from the stored words' statistics
      // (one EXPLAIN, each word a branch of a UNION ALL, as placeRows asks).
      const rarestWord = async () => {
        const params: unknown[] = [];
        const p = (value: unknown) => `$${params.push(value)}`;
        const { children } = await planRows(db, terms.map((t) => wordBranch(t, p, base)).join(' UNION ALL '), params);
        return children.length === terms.length ? Math.min(...children) : Infinity;
      };
      tally = await countRows(db, counted, totalBound, {
        withIds: true, overBound: overBoundOf(engine), ...(textMatch && spatial.length ? { read: placeRows } : {}),
        ...(textMatch && terms.length > 1 ? { upper: rarestWord } : {}),
      });
    }
    const { n: found, estimated, ids: countedIds } = tally;
    const total = found + similarNotLexical;
    // Every match, when the count read them: the counted rows and the similar ones passing the filters.
    const matchIds = countedIds && [...new Set([...countedIds, ...vectorMatches.map((n) => n.item_id)])];

    // The page: by rank through the vector index, else ordered in SQL.
    let page: { item_id: string; score?: number }[] = [];
    if (take > 0 && (offset < total || estimated)) {
      if (relevance && ranking) {
        const known = estimated ? undefined : total;
        // The similar items rank first (any other match is less similar, or it would be among them,
        // but for lexical matches the index missed: LEXICAL_RANKED_MAX).
        const similarIds = new Set(vectorMatches.map((n) => n.item_id));
        const missed = fromSimilar ? countedIds?.filter((id) => !similarIds.has(id)) ?? [] : [];
        const ranked = !fromSimilar ? await nearest(ranking, depth, matching, known, { ids: matchIds, margin: REFINE_MARGIN })
          : missed.length && missed.length <= LEXICAL_RANKED_MAX
            ? [...vectorMatches, ...await exactNearest(db, ranking, depth, filterOf(byIds(missed, true)))].sort(byRank) : vectorMatches;
        page = ranked.slice(offset, depth).map((n) => ({ item_id: n.item_id, score: n.similarity }));
      } else {
        const ids = collected ?? (await orderedPage(matchIds ? byIds(matchIds, false) : matching, found <= COLLECT_MAX)).ids;
        page = ids.map((item_id) => ({ item_id }));
      }
    }

    // The page's records in order, with the distance and (when something ranks) the exact score.
    const params: unknown[] = [page.map((r) => r.item_id)];
    const p = (value: unknown) => `$${params.push(value)}`;
    const distance = distanceFrom ? `(SELECT min(search.distance_m(${p(distanceFrom.lat)}, ${p(distanceFrom.lng)}, l.lat, l.lng))
        FROM ${OWN_LOCATIONS})` : 'NULL::float8';
    const needScores = ranking && !(relevance && ranking);
    const embedding = needScores ? `CASE WHEN ${sameModel(p)} THEN search.embedding_f16(i.embedding) END` : 'NULL::bytea';
    const { rows: records } = page.length
      ? await db.query<SearchItem & { dist: number | null; e: Uint8Array | null }>(
        `SELECT ${RESULT_COLUMNS}, ${distance} AS dist, ${embedding} AS e FROM search.items i WHERE i.item_id = ANY($1::uuid[])`, params)
      : { rows: [] };
    const byId = new Map(records.map((r) => [r.item_id, r]));
    const items: SearchItem[] = page.map((r) => {
      const { dist, e, ...record } = byId.get(r.item_id)!;
      let score = r.score;
      if (score === undefined && e && ranking) score = cosineSimilarity(ranking, decodeHalf(bytesOf(e)));
      return { ...record, ...(score !== undefined ? { score } : {}), ...(dist != null ? { distanceMeters: Number(dist) } : {}) };
    });
    return {
      context: { ...context, version: context.version ?? DEFAULT_VERSION },
      message: { items, meta: { total, ...(estimated ? { total_estimated: true as const } : {}), limit, offset, sort_applied: sort } },
    };
  });
}
