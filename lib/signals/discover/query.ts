/**
 * Discover (spec `POST /api/v1/network/item/discover`): the validated query both answering paths
 * take — the search service (lib/discover/search-path.ts) and signals' native query
 * (lib/discover/native.ts) — and the page they answer.
 */
import type { ItemRecord } from '../../network/items.ts';
import type { Domain, FieldInfo } from '../../network/config.ts';
import type { GeoPoint } from '../../network/geo.ts';

export const DISCOVER_SORTS = ['relevance', 'newest', 'nearest'] as const;
export type DiscoverSort = (typeof DISCOVER_SORTS)[number];

export type { GeoPoint };

/** One filter: the item's `field` has one of `values` (for an array field: contains any of them). */
export interface DiscoverFilter {
  field: FieldInfo;
  /** Already converted to the field's (item) kind. */
  values: (string | number | boolean)[];
}

/** A validated discover request, with the network's domain resolved. */
export interface DiscoverQuery {
  network: string;
  domain: Domain;
  q?: string;
  filters: DiscoverFilter[];
  sort?: DiscoverSort;
  /** item_latitude/item_longitude: the distance filter's centre, else a centre for nearest. */
  point?: GeoPoint;
  /** Only with `point`: keep items with a location within this many metres of it. */
  distanceMeters?: number;
  bbox?: { minLat: number; maxLat: number; minLng: number; maxLng: number };
  /** ordering_latitude/ordering_longitude: orders by distance, never filters. */
  orderingCenter?: GeoPoint;
  anchorItemId?: string;
  limit: number;
  offset: number;
}

/** An item of a discover page: the item record plus, when applicable, its score and distance. */
export type DiscoverItem = Omit<ItemRecord, 'lifecycle_status'> & {
  lifecycle_status?: string;
  score?: number;
  distanceMeters?: number;
};

export interface DiscoverMeta {
  total: number;
  limit: number;
  offset: number;
  source: 'signals_search' | 'native_fallback';
  degraded: boolean;
  /** Echoed when a distance filter applied. */
  distance_meters?: number;
  sort_applied: DiscoverSort;
  /** Whether the anchor item's embedding ranked the results. */
  anchor_applied: boolean;
}

export interface DiscoverPage {
  meta: DiscoverMeta;
  items: DiscoverItem[];
}

/** The domain's fields holding an item's coordinates (`x-location`), when it declares them. */
export function locationFields(domain: Domain): { latitude: FieldInfo; longitude: FieldInfo } | null {
  const latitude = domain.fields.find((f) => f.location === 'latitude');
  const longitude = domain.fields.find((f) => f.location === 'longitude');
  return latitude && longitude ? { latitude, longitude } : null;
}
