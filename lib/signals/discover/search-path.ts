/**
 * Discover answered by the search service: the discover query translated onto `POST /v1/search`
 * (spec "POST /v1/search"), and its answer mapped back (docs/decisions.md, "Discover:" bullets).
 *
 * Translation: `q` → intent.textSearch; `anchor_item_id` → intent.item.id; item_latitude/longitude
 * with distance_meters → intent.spatial s_dwithin (Point [lng, lat]); the ordering point → intent
 * .orderingCenter, else item_latitude/longitude without a distance (a centre for nearest); each
 * filter → `in` on `item_state.<field>` (array fields: `contains_any`); the bounding box → `gte`/`lte`
 * filters on the domain's x-location fields (the search service has no box operator; an item's
 * locations are made from those fields); sort, limit and offset as given.
 */
import { randomUUID } from 'node:crypto';
import { postToSearch, SearchUnavailableError, type SearchClientDeps } from '../../clients/search-client.ts';
import { locationFields, type DiscoverItem, type DiscoverPage, type DiscoverQuery, type DiscoverSort } from './query.ts';

/** The envelope version signals sends (spec "Versioning": the search envelope's default 1.0.0). */
export const SEARCH_ENVELOPE_VERSION = '1.0.0';

const point = (p: { lat: number; lng: number }) => ({ type: 'Point', coordinates: [p.lng, p.lat] });

/** Builds the `/v1/search` body for `query`. */
export function toSearchRequest(query: DiscoverQuery): Record<string, unknown> {
  const filters: { op: string; target: string; value: unknown }[] = query.filters.map((f) => ({
    op: f.field.kind === 'array' ? 'contains_any' : 'in',
    target: `item_state.${f.field.name}`,
    value: f.values,
  }));
  if (query.bbox) {
    // Validation guarantees the domain declares x-location fields when a bounding box is given.
    const { latitude, longitude } = locationFields(query.domain)!;
    filters.push(
      { op: 'gte', target: `item_state.${latitude.name}`, value: query.bbox.minLat },
      { op: 'lte', target: `item_state.${latitude.name}`, value: query.bbox.maxLat },
      { op: 'gte', target: `item_state.${longitude.name}`, value: query.bbox.minLng },
      { op: 'lte', target: `item_state.${longitude.name}`, value: query.bbox.maxLng },
    );
  }
  const hasDistance = query.point && query.distanceMeters !== undefined;
  const orderingCenter = query.orderingCenter ?? (hasDistance ? undefined : query.point);
  const intent: Record<string, unknown> = {
    ...(query.q !== undefined ? { textSearch: query.q } : {}),
    ...(query.anchorItemId ? { item: { id: query.anchorItemId } } : {}),
    ...(hasDistance ? { spatial: [{ op: 's_dwithin', geometry: point(query.point!), distanceMeters: query.distanceMeters }] } : {}),
    ...(filters.length ? { filters } : {}),
    ...(query.sort ? { sort: query.sort } : {}),
    ...(orderingCenter ? { orderingCenter: point(orderingCenter) } : {}),
  };
  return {
    context: {
      version: SEARCH_ENVELOPE_VERSION, messageId: randomUUID(), timestamp: new Date().toISOString(),
      networkId: query.network, domain: query.domain.name, itemType: query.domain.itemType,
    },
    message: { intent, pagination: { limit: query.limit, offset: query.offset } },
  };
}

interface SearchResponse {
  message?: { items?: Record<string, any>[]; meta?: { total?: number; sort_applied?: string } };
}

const SORTS = new Set<string>(['relevance', 'newest', 'nearest']);

/** The item record fields (and score, distanceMeters) of a search result. */
function toDiscoverItem(item: Record<string, any>): DiscoverItem {
  return {
    item_network: item.item_network, item_domain: item.item_domain, item_type: item.item_type, item_id: item.item_id,
    item_state: item.item_state, item_locations: item.item_locations, item_instance_url: item.item_instance_url ?? null,
    item_schema_url: item.item_schema_url ?? null, created_by: item.created_by ?? null,
    created_at: item.created_at, updated_at: item.updated_at,
    ...(item.lifecycle_status !== undefined ? { lifecycle_status: item.lifecycle_status } : {}),
    ...(typeof item.score === 'number' ? { score: item.score } : {}),
    ...(typeof item.distanceMeters === 'number' ? { distanceMeters: item.distanceMeters } : {}),
  };
}

/**
 * Asks the search service.
 * @throws SearchUnavailableError (also for an answer without items or total) or SearchRejectedError.
 */
export async function discoverViaSearch(ctx: SearchClientDeps, query: DiscoverQuery): Promise<DiscoverPage> {
  const body = await postToSearch<SearchResponse>(ctx, '/v1/search', toSearchRequest(query));
  const items = body?.message?.items;
  const meta = body?.message?.meta;
  if (!Array.isArray(items) || typeof meta?.total !== 'number' || !SORTS.has(meta.sort_applied ?? '')) {
    throw new SearchUnavailableError('search service answered without items, total or sort_applied', 'bad_response', 200);
  }
  const sort = meta.sort_applied as DiscoverSort;
  return {
    meta: {
      total: meta.total, limit: query.limit, offset: query.offset, source: 'signals_search', degraded: false,
      ...(query.point && query.distanceMeters !== undefined ? { distance_meters: query.distanceMeters } : {}),
      sort_applied: sort,
      anchor_applied: Boolean(query.anchorItemId) && sort === 'relevance',
    },
    items: items.map(toDiscoverItem),
  };
}
