/**
 * The search core behind `POST /v1/search` and `/v1/search/flat` (spec "Search service"; the
 * decisions of the issue and docs/decisions.md):
 * - scope: items of `context.networkId` / `domain` / `itemType` that are live; the anchor itself is
 *   never a result; every condition is ANDed;
 * - `textSearch` narrows: an item qualifies when every word of the text occurs in its searchable
 *   text, or when the cosine similarity of its embedding to the text's reaches the provider's
 *   threshold; the text's embedding ranks unless an anchor supplies the ranking vector;
 * - anchor `item.id`: indexed in the same network (404), the interaction matrix lets its domain
 *   reach `context.domain` (403); its embedding ranks and its first location can be the centre;
 * - `spatial` s_dwithin filters (any location within range, bounding-box prefilter on the GiST
 *   index); `orderingCenter` only orders;
 * - order: `sort`, else relevance with a ranking vector, else nearest with a centre
 *   (orderingCenter, the first s_dwithin point, the anchor's location), else newest; an order
 *   whose precondition is unmet degrades to newest; ties fall back to newest, then item id;
 * - `score` is the cosine similarity to the ranking vector, `distanceMeters` the distance from the
 *   centre (nearest order) or the first s_dwithin point to the item's nearest location;
 * - `meta.total` is exact (a count under the same conditions), and every page is complete.
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
import { hnswSettings, sameModelSql, vectorSql, type SqlRunner, type VectorBackendName, type VectorSql } from './vector-backend.ts';

/** Everything a search needs; built once per process (lib/search/engine.ts) or per test. */
export interface SearchEngine {
  network: Network;
  backend: VectorBackendName;
  provider: EmbeddingProvider;
  /** Runs `fn` in one transaction on one connection. */
  transaction<T>(fn: (db: SqlRunner) => Promise<T>): Promise<T>;
  /** The embedding of a query text (cached). */
  embedText(text: string): Promise<Float32Array>;
}

/** A result: the item record with `lifecycle_status`, and `score` / `distanceMeters` when they apply. */
export type SearchItem = ItemRecord & { score?: number; distanceMeters?: number };

export interface SearchResponse {
  context: Record<string, unknown> & { version: string };
  message: { items: SearchItem[]; meta: { total: number; limit: number; offset: number; sort_applied: SortOrder } };
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

/**
 * Answers a validated `/v1/search` body.
 * @throws SearchError 400 (scope or filters), 404 / 403 (anchor).
 */
export async function runSearch(engine: SearchEngine, body: SearchBody): Promise<SearchResponse> {
  const { network, provider, backend } = engine;
  const { context, message: { intent, pagination } } = body;
  const limit = pagination?.limit ?? DEFAULT_LIMIT;
  const offset = pagination?.offset ?? 0;
  const { filters } = checkScope(network, body);

  const terms = textTerms(intent.textSearch ?? '');
  // Embedded before a connection is taken: a model call can take a while.
  const textVector = terms.length ? await engine.embedText(intent.textSearch!.trim()) : undefined;

  return engine.transaction(async (db) => {
    const anchor = intent.item ? await loadAnchor(db, network, body, provider, intent.item.id) : undefined;
    const spatial = (intent.spatial ?? []).map((s) => ({ point: fromCoordinates(s.geometry.coordinates), meters: s.distanceMeters }));
    const ranking = anchor?.vector ?? (textVector ? Array.from(textVector) : undefined);
    const centre = intent.orderingCenter ? fromCoordinates(intent.orderingCenter.coordinates) : spatial[0]?.point ?? anchor?.location;
    const sort = sortApplied(intent.sort, ranking !== undefined, centre !== undefined);
    const distanceFrom = sort === 'nearest' ? centre : spatial[0]?.point;

    // Each parameter is added where the SQL first uses it: a count must reference all of its own.
    const params: unknown[] = [];
    const p = (value: unknown) => `$${params.push(value)}`;
    let modelParams: { id: string; quantization: string } | undefined;
    const sameModel = () => sameModelSql('i', provider.version, (modelParams ??= { id: p(provider.version.model_id), quantization: p(provider.version.quantization) }));
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
    // Relevance ranks only vectors comparable with the ranking vector.
    if (ranking && sort === 'relevance') where.push(sameModel());

    // Text narrowing: every word contained, or the similarity to the text reaches the threshold.
    // The similarity is NULL for vectors of another model version (CASE, not AND: a vector of
    // another dimension count must never reach it).
    let textVectorSql: VectorSql | undefined;
    let textSim: string | undefined;
    let narrowing = (_a: string, _sim: string) => 'true';
    if (textVector) {
      textVectorSql = vectorSql(backend, provider.version, p(Array.from(textVector)));
      textSim = `CASE WHEN ${sameModel()} THEN ${textVectorSql.similarity('i')} END`;
      const words = terms.map((t) => p(t));
      const threshold = p(provider.textThreshold);
      narrowing = (a, sim) => `((${words.map((w) => `strpos(lower(${a}.search_text), ${w}) > 0`).join(' AND ')}) OR ${sim} >= ${threshold})`;
    }
    const narrowingParams = [...params];
    // The ranking vector: the anchor's, else the text's (whose SQL is already there).
    const textRanks = ranking !== undefined && !anchor?.vector;
    const rankVectorSql = textRanks ? textVectorSql : ranking ? vectorSql(backend, provider.version, p(ranking)) : undefined;
    const score = !rankVectorSql ? undefined : textRanks ? textSim
      : sort === 'relevance' ? rankVectorSql.similarity('i') : `CASE WHEN ${sameModel()} THEN ${rankVectorSql.similarity('i')} END`;
    const distance = distanceFrom ? `(SELECT min(search.distance_m(${p(distanceFrom.lat)}, ${p(distanceFrom.lng)}, l.lat, l.lng))
        FROM search.item_locations l WHERE l.item_id = i.item_id)` : undefined;
    const rankingParams = [...params];
    const page = `LIMIT ${p(limit)} OFFSET ${p(offset)}`;
    /** The order applied: `k` prefixes the row's columns, `c` the computed score and dist. */
    const order = (k: string, c: string) => (sort === 'relevance' ? `${c}score DESC, ${k}created_at DESC, ${k}item_id DESC`
      : sort === 'nearest' ? `${c}dist ASC NULLS LAST, ${k}created_at DESC, ${k}item_id DESC` : `${k}created_at DESC, ${k}item_id DESC`);
    const whereSql = where.join('\n  AND ');

    let total: number;
    let ranked: { item_id: string; score: number | null; dist: number | null }[] = [];
    if (backend === 'exact') {
      // One pass over the rows: each similarity computed once per row (the OFFSET 0 fence keeps
      // the subquery's columns from being inlined into every use), the count over the same rows.
      const inner = `SELECT i.item_id, i.created_at${textSim ? ', i.search_text' : ''}, ${textSim ?? 'NULL::float8'} AS text_sim,
          ${score && !textRanks ? score : 'NULL::float8'} AS score, ${distance ?? 'NULL::float8'} AS dist
        FROM search.items i WHERE ${whereSql} OFFSET 0`;
      const from = `FROM (${inner}) s WHERE ${narrowing('s', 's.text_sim')}`;
      const { rows } = await db.query<{ item_id: string; score: number | null; dist: number | null; total: number }>(
        `SELECT s.item_id, s.created_at, ${textRanks ? 's.text_sim' : 's.score'} AS score, s.dist, count(*) OVER ()::int AS total
           ${from} ORDER BY ${order('s.', '')} ${page}`, params);
      ranked = rows;
      total = rows[0]?.total ?? (await db.query<{ total: number }>(`SELECT count(*)::int AS total ${from}`, rankingParams)).rows[0].total;
    } else {
      const narrowed = `FROM search.items i WHERE ${whereSql} AND ${narrowing('i', textSim ?? 'NULL::float8')}`;
      total = (await db.query<{ total: number }>(`SELECT count(*)::int AS total ${narrowed}`, narrowingParams)).rows[0].total;
      const expected = Math.max(0, Math.min(limit, total - offset));
      const pageSql = (orderBy: string) => `SELECT i.item_id, ${score ?? 'NULL::float8'} AS score, ${distance ?? 'NULL::float8'} AS dist
        ${narrowed} ORDER BY ${orderBy} ${page}`;
      if (expected > 0 && sort === 'relevance') {
        // The HNSW index serves ORDER BY distance alone; should it return fewer rows than the
        // exact count promises (iterative scan limits), the page is read again by exact sort.
        for (const setting of hnswSettings(offset + limit)) await db.query(setting);
        ranked = (await db.query(pageSql(rankVectorSql!.indexOrder!('i')), params)).rows;
      }
      if (ranked.length < expected) ranked = (await db.query(pageSql(order('i.', '')), params)).rows;
    }

    // The page's records, in the ranked order.
    const { rows: records } = ranked.length
      ? await db.query<SearchItem>(`SELECT ${RESULT_COLUMNS} FROM search.items i WHERE i.item_id = ANY($1::uuid[])`, [ranked.map((r) => r.item_id)])
      : { rows: [] };
    const byId = new Map(records.map((r) => [r.item_id, r]));
    const items: SearchItem[] = ranked.map((r) => ({
      ...byId.get(r.item_id)!,
      ...(r.score != null ? { score: Number(r.score) } : {}),
      ...(r.dist != null ? { distanceMeters: Number(r.dist) } : {}),
    }));
    return {
      context: { ...context, version: context.version ?? DEFAULT_VERSION },
      message: { items, meta: { total, limit, offset, sort_applied: sort } },
    };
  });
}
