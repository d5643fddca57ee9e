/**
 * The search core behind `POST /v1/search` and `/v1/search/flat` (spec "Search service"; the
 * decisions of the issue and docs/decisions.md):
 * - scope: items of `context.networkId` / `domain` / `itemType` that are live; the anchor itself is
 *   never a result; every condition is ANDed;
 * - `textSearch` narrows (issue 14, docs/decisions.md): an item matches when every word of the
 *   text occurs in its searchable text (served by a trigram index), or when it is among the
 *   VECTOR_MATCH_LIMIT nearest neighbours of the text's embedding within the scope and filters and
 *   its cosine similarity reaches the provider's threshold (served by the vector index); the
 *   text's embedding ranks unless an anchor supplies the ranking vector;
 * - anchor `item.id`: indexed in the same network (404), the interaction matrix lets its domain
 *   reach `context.domain` (403); its embedding ranks and its first location can be the centre;
 * - `spatial` s_dwithin filters (any location within range, bounding-box prefilter on the GiST
 *   index); `orderingCenter` only orders;
 * - order: `sort`, else relevance with a ranking vector, else nearest with a centre
 *   (orderingCenter, the first s_dwithin point, the anchor's location), else newest; an order
 *   whose precondition is unmet degrades to newest; ties fall back to newest, then item id;
 * - `score` is the cosine similarity to the ranking vector, `distanceMeters` the distance from the
 *   centre (nearest order) or the first s_dwithin point to the item's nearest location;
 * - `meta.total` is exact up to TOTAL_EXACT_BOUND; past it, an estimate from a table sample,
 *   flagged `meta.total_estimated: true`; every page is complete.
 * Nearest neighbours come from the engine's VectorIndex (lib/search/vector-index.ts) when it is
 * ready and the candidates are many, else from the exact path.
 * Relevance compares only vectors of the provider's model version: during a re-index after a model
 * change, items not yet re-embedded cannot be ranked (or matched by similarity) until they are.
 */
import type { EmbeddingProvider } from './embeddings/index.ts';
import { sameModelVersion } from './embeddings/index.ts';
import type { ItemRecord } from '../network/items.ts';
import { interactionAllowed, type Network } from '../network/config.ts';
import { filterSql, resolveFilter, type ResolvedFilter } from './filters.ts';
import { boundingBox, fromCoordinates, type GeoPoint } from '../network/geo.ts';
import { DEFAULT_LIMIT, DEFAULT_VERSION, SearchError, type SearchBody, type SortOrder } from './request.ts';
import { sameModelSql, type SqlRunner, type VectorBackendName } from './vector-backend.ts';
import { decodeRealArray, exactNearest, type CandidateFilter, type Neighbour, type VectorIndex } from './vector-index.ts';

/** Nearest neighbours of a text's embedding that can match it by similarity (see the file's rules). */
export const VECTOR_MATCH_LIMIT = 1000;
/** `meta.total` is counted exactly up to this many rows; past it, estimated. */
export const TOTAL_EXACT_BOUND = 1000;
/** Candidate sets of at most this many rows are ranked exactly rather than through the index. */
export const EXACT_MAX_ROWS = 1000;
/** Rows a total estimate samples (about; TABLESAMPLE SYSTEM reads whole pages). */
const ESTIMATE_SAMPLE_ROWS = 5000;

/** Everything a search needs; built once per process (lib/search/engine.ts) or per test. */
export interface SearchEngine {
  network: Network;
  backend: VectorBackendName;
  provider: EmbeddingProvider;
  /** Runs `fn` in one transaction on one connection. */
  transaction<T>(fn: (db: SqlRunner) => Promise<T>): Promise<T>;
  /** The embedding of a query text (cached). */
  embedText(text: string): Promise<Float32Array>;
  /** The vector index when it can answer now; undefined while it is built (exact path). */
  vectorIndex(): VectorIndex | undefined;
  /** Candidate sets up to this size are ranked exactly (default EXACT_MAX_ROWS). */
  exactMaxRows?: number;
  /** meta.total is exact up to this many rows (default TOTAL_EXACT_BOUND). */
  totalExactBound?: number;
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

interface Anchor {
  id: string;
  vector?: number[];
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
    embedding: number[]; lat: number | null; lng: number | null;
  }>(
    `SELECT i.item_network, i.item_domain, i.model_id, i.model_quantization, i.model_dimensions, i.embedding, l.lat, l.lng
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
    vector: comparable ? row.embedding.map(Number) : undefined,
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

/** Rows passing `conds`, counted up to `bound`: the count, or undefined when there are more. */
async function boundedCount(db: SqlRunner, conds: Cond[], bound: number): Promise<number | undefined> {
  const f = filterOf(conds);
  const { rows: [row] } = await db.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM (SELECT 1 FROM search.items i WHERE ${f.where} LIMIT ${bound + 1}) s`, f.params);
  return row.n <= bound ? row.n : undefined;
}

/**
 * Estimated rows passing `conds`: the share passing in a repeatable page sample of about
 * ESTIMATE_SAMPLE_ROWS rows, times the table's row estimate (pg_class.reltuples); at least `floor`.
 */
async function estimateCount(db: SqlRunner, conds: Cond[], floor: number): Promise<number> {
  const { rows: [{ n }] } = await db.query<{ n: number }>(`SELECT greatest(reltuples, 0)::float8 AS n FROM pg_class WHERE oid = 'search.items'::regclass`);
  // A table never analysed has no estimate (-1): it is read whole.
  const percent = n > 0 ? Math.min(100, Math.max(0.01, (ESTIMATE_SAMPLE_ROWS / n) * 100)) : 100;
  const f = filterOf(conds);
  const { rows: [row] } = await db.query<{ hit: number; seen: number }>(
    `SELECT count(*) FILTER (WHERE ${f.where})::int AS hit, count(*)::int AS seen
       FROM search.items i TABLESAMPLE SYSTEM (${percent.toFixed(4)}) REPEATABLE (0)`, f.params);
  if (percent === 100) return Math.max(floor, row.hit);
  return Math.max(floor, row.seen ? Math.round((row.hit / row.seen) * n) : floor);
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
  const depth = offset + limit;
  const exactMax = engine.exactMaxRows ?? EXACT_MAX_ROWS;
  const totalBound = engine.totalExactBound ?? TOTAL_EXACT_BOUND;
  const { filters } = checkScope(network, body);

  const terms = textTerms(intent.textSearch ?? '');
  // Embedded before a connection is taken: a model call can take a while.
  const textVector = terms.length ? await engine.embedText(intent.textSearch!.trim()) : undefined;
  const index = engine.vectorIndex();

  return engine.transaction(async (db) => {
    const anchor = intent.item ? await loadAnchor(db, network, body, provider, intent.item.id) : undefined;
    const spatial = (intent.spatial ?? []).map((s) => ({ point: fromCoordinates(s.geometry.coordinates), meters: s.distanceMeters }));
    const ranking = anchor?.vector ? Float32Array.from(anchor.vector) : textVector;
    const centre = intent.orderingCenter ? fromCoordinates(intent.orderingCenter.coordinates) : spatial[0]?.point ?? anchor?.location;
    const sort = sortApplied(intent.sort, ranking !== undefined, centre !== undefined);
    const distanceFrom = sort === 'nearest' ? centre : spatial[0]?.point;
    const relevance = sort === 'relevance';

    // The scope, filters and places; then the rows whose vectors compare with the query's.
    const scope: Cond = (p) => {
      const where = [
        `i.item_network = ${p(context.networkId)}`, `i.item_domain = ${p(context.domain)}`, `i.item_type = ${p(context.itemType)}`,
        `i.lifecycle_status = 'live'`,
      ];
      if (anchor) where.push(`i.item_id <> ${p(anchor.id)}::uuid`);
      for (const f of filters) where.push(filterSql(f, 'i', p));
      for (const s of spatial) {
        const box = boundingBox(s.point, s.meters);
        where.push(`EXISTS (SELECT 1 FROM search.item_locations l WHERE l.item_id = i.item_id
          AND point(l.lng, l.lat) <@ box(point(${p(box.minLng)}, ${p(box.minLat)}), point(${p(box.maxLng)}, ${p(box.maxLat)}))
          AND search.distance_m(${p(s.point.lat)}, ${p(s.point.lng)}, l.lat, l.lng) <= ${p(s.meters)})`);
      }
      return where.join('\n AND ');
    };
    const sameModel: Cond = (p) => sameModelSql('i', provider.version, { id: p(provider.version.model_id), quantization: p(provider.version.quantization) });
    const comparable = [scope, sameModel];
    // Relevance ranks only vectors comparable with the ranking vector.
    const base = relevance && ranking ? comparable : [scope];

    /** The `k` nearest rows to `vector` passing `conds` (`known`: how many pass, when counted). */
    const nearest = async (vector: Float32Array, k: number, conds: Cond[], known: number | undefined): Promise<Neighbour[]> => {
      if (index && (known === undefined || known > exactMax)) {
        const found = await index.search(db, vector, k, filterOf(conds));
        if (found.length >= (known === undefined ? k : Math.min(k, known))) return found;
      }
      return exactNearest(db, vector, k, filterOf(conds));
    };

    // Text: the lexical condition (trigram index) and the text's nearest neighbours above the threshold.
    let textMatch: Cond | undefined;
    let lexical: Cond | undefined;
    let vectorMatches: Neighbour[] = [];
    const comparableCount = ranking ? await boundedCount(db, comparable, exactMax) : undefined;
    if (textVector) {
      lexical = (p) => terms.map((t) => `lower(i.search_text) LIKE ${p(`%${t}%`)}`).join(' AND ');
      const found = await nearest(textVector, VECTOR_MATCH_LIMIT, comparable, comparableCount);
      vectorMatches = found.filter((n) => n.similarity >= provider.textThreshold);
      const ids = vectorMatches.map((n) => n.item_id);
      textMatch = ids.length ? (p) => `(${lexical!(p)}) OR i.item_id = ANY(${p(ids)}::uuid[])` : lexical;
    }
    const matching = textMatch ? [...base, textMatch] : base;

    // meta.total: |lexical ∪ similar| = |lexical| + |similar but not lexical|, exact up to the bound.
    let total: number;
    let estimated = false;
    const counted = textMatch ? [...base, lexical!] : base;
    const exact = await boundedCount(db, counted, totalBound);
    if (exact !== undefined) total = exact;
    else {
      total = await estimateCount(db, counted, totalBound + 1);
      estimated = true;
    }
    if (vectorMatches.length) {
      const f = filterOf([(p) => `i.item_id = ANY(${p(vectorMatches.map((n) => n.item_id))}::uuid[])`, (p) => `NOT (${lexical!(p)})`]);
      total += (await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM search.items i WHERE ${f.where}`, f.params)).rows[0].n;
    }

    // The page: by rank through the vector index, else ordered in SQL.
    let page: { item_id: string; score?: number }[] = [];
    if (offset < total || estimated) {
      if (relevance && ranking) {
        const known = estimated ? undefined : total;
        const ranked = ranking === textVector && depth <= vectorMatches.length ? vectorMatches
          : await nearest(ranking, depth, matching, known);
        page = ranked.slice(offset, depth).map((n) => ({ item_id: n.item_id, score: n.similarity }));
      } else {
        const f = filterOf(matching);
        const p = (value: unknown) => `$${f.params.push(value)}`;
        const distance = distanceFrom ? `(SELECT min(search.distance_m(${p(distanceFrom.lat)}, ${p(distanceFrom.lng)}, l.lat, l.lng))
            FROM search.item_locations l WHERE l.item_id = i.item_id)` : 'NULL::float8';
        const order = sort === 'nearest' ? 'dist ASC NULLS LAST, i.created_at DESC, i.item_id DESC' : 'i.created_at DESC, i.item_id DESC';
        const { rows } = await db.query<{ item_id: string }>(
          `SELECT i.item_id::text AS item_id, ${distance} AS dist FROM search.items i WHERE ${f.where}
            ORDER BY ${order} LIMIT ${p(limit)} OFFSET ${p(offset)}`, f.params);
        page = rows;
      }
    }

    // The page's records in order, with the distance and (when something ranks) the exact score.
    const params: unknown[] = [page.map((r) => r.item_id)];
    const p = (value: unknown) => `$${params.push(value)}`;
    const distance = distanceFrom ? `(SELECT min(search.distance_m(${p(distanceFrom.lat)}, ${p(distanceFrom.lng)}, l.lat, l.lng))
        FROM search.item_locations l WHERE l.item_id = i.item_id)` : 'NULL::float8';
    const needScores = ranking && !(relevance && ranking);
    const embedding = needScores ? `CASE WHEN ${sameModel(p)} THEN array_send(i.embedding) END` : 'NULL::bytea';
    const { rows: records } = page.length
      ? await db.query<SearchItem & { dist: number | null; e: Uint8Array | null }>(
        `SELECT ${RESULT_COLUMNS}, ${distance} AS dist, ${embedding} AS e FROM search.items i WHERE i.item_id = ANY($1::uuid[])`, params)
      : { rows: [] };
    const byId = new Map(records.map((r) => [r.item_id, r]));
    const items: SearchItem[] = page.map((r) => {
      const { dist, e, ...record } = byId.get(r.item_id)!;
      let score = r.score;
      if (score === undefined && e && ranking) {
        const v = decodeRealArray(e);
        score = 0;
        for (let n = 0; n < v.length; n++) score += v[n] * ranking[n];
      }
      return { ...record, ...(score !== undefined ? { score } : {}), ...(dist != null ? { distanceMeters: Number(dist) } : {}) };
    });
    return {
      context: { ...context, version: context.version ?? DEFAULT_VERSION },
      message: { items, meta: { total, ...(estimated ? { total_estimated: true as const } : {}), limit, offset, sort_applied: sort } },
    };
  });
}
