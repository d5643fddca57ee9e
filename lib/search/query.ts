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
import type { EmbeddingProvider } from '../embeddings/index.ts';
import { sameModelVersion } from '../embeddings/index.ts';
import type { ItemRecord } from '../items.ts';
import { interactionAllowed, type Network } from '../network.ts';
import { filterSql, resolveFilter, type ResolvedFilter } from './filters.ts';
import { boundingBox, fromCoordinates, type GeoPoint } from './geo.ts';
import { DEFAULT_LIMIT, DEFAULT_VERSION, SearchError, type SearchBody, type SortOrder } from './request.ts';
import { hnswSettings, sameModelSql, vectorSql, type SqlRunner, type VectorBackendName } from './vector-backend.ts';

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
const NEWEST = 'i.created_at DESC, i.item_id DESC';

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

    // Each parameter is added where the SQL first uses it: the count must reference all of its own.
    const params: unknown[] = [];
    const p = (value: unknown) => `$${params.push(value)}`;
    let modelParams: { id: string; quantization: string } | undefined;
    const model = () => (modelParams ??= { id: p(provider.version.model_id), quantization: p(provider.version.quantization) });
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
    if (textVector) {
      const words = terms.map((t) => `strpos(lower(i.search_text), ${p(t)}) > 0`).join(' AND ');
      const text = vectorSql(backend, provider.version, p(Array.from(textVector)));
      // CASE, not AND: a vector of another dimension count must never reach the similarity.
      where.push(`((${words}) OR CASE WHEN ${sameModelSql('i', provider.version, model())}
        THEN ${text.similarity('i')} >= ${p(provider.textThreshold)} ELSE false END)`);
    }
    // Relevance ranks only vectors comparable with the ranking vector.
    if (ranking && sort === 'relevance') where.push(sameModelSql('i', provider.version, model()));
    const whereSql = where.join('\n  AND ');
    const countParams = [...params];

    const select = [RESULT_COLUMNS];
    const rank = ranking ? vectorSql(backend, provider.version, p(ranking)) : undefined;
    if (rank) {
      select.push(sort === 'relevance' ? `${rank.similarity('i')} AS score`
        : `CASE WHEN ${sameModelSql('i', provider.version, model())} THEN ${rank.similarity('i')} END AS score`);
    }
    if (distanceFrom) {
      select.push(`(SELECT min(search.distance_m(${p(distanceFrom.lat)}, ${p(distanceFrom.lng)}, l.lat, l.lng))
        FROM search.item_locations l WHERE l.item_id = i.item_id) AS "distanceMeters"`);
    }
    const page = `LIMIT ${p(limit)} OFFSET ${p(offset)}`;
    const pageSql = (order: string) => `SELECT ${select.join(', ')} FROM search.items i WHERE ${whereSql} ORDER BY ${order} ${page}`;
    const exactOrder = sort === 'relevance' ? `score DESC, ${NEWEST}` : sort === 'nearest' ? `"distanceMeters" ASC NULLS LAST, ${NEWEST}` : NEWEST;

    const { rows: [{ total }] } = await db.query<{ total: number }>(`SELECT count(*)::int AS total FROM search.items i WHERE ${whereSql}`, countParams);
    const expected = Math.max(0, Math.min(limit, total - offset));
    let rows: (SearchItem & { score?: number | null; distanceMeters?: number | null })[] = [];
    if (expected > 0) {
      if (sort === 'relevance' && rank?.indexOrder) {
        // pgvector: the HNSW index serves ORDER BY distance alone; should it return fewer rows than
        // the exact count promises (iterative scan limits), the page is read again by exact sort.
        for (const setting of hnswSettings(offset + limit)) await db.query(setting);
        rows = (await db.query(pageSql(rank.indexOrder('i')), params)).rows;
      }
      if (rows.length < expected) rows = (await db.query(pageSql(exactOrder), params)).rows;
    }
    const items = rows.map(({ score, distanceMeters, ...record }) => ({
      ...record,
      ...(score != null ? { score: Number(score) } : {}),
      ...(distanceMeters != null ? { distanceMeters: Number(distanceMeters) } : {}),
    })) as SearchItem[];
    return {
      context: { ...context, version: context.version ?? DEFAULT_VERSION },
      message: { items, meta: { total, limit, offset, sort_applied: sort } },
    };
  });
}
