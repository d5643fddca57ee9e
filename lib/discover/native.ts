/**
 * Signals' native discover: the same query as the search service's `/v1/search` rules, answered
 * from `signals.items` when the search service cannot answer (sql/005_signals_discover.sql holds
 * the columns, functions and indexes it relies on).
 *
 * Rules kept alike with `/v1/search` (spec "POST /v1/search", docs/decisions.md):
 * - only live items; the anchor item itself is never a result; conditions are ANDed;
 * - text (`q`): every significant word must occur in the item's searchable text, as a part of it or
 *   as a misspelt word (pg_trgm strict word similarity >= TEXT_SIMILARITY_THRESHOLD); relevance
 *   is the mean of the words' strict word similarities (1 for an exact word);
 * - filters: the field has one of the values (array fields: contain any of them);
 * - bounding box / distance: any of the item's locations inside the box / within range;
 * - order: requested, else inferred (relevance when there is text, else nearest when there is a
 *   centre, else newest); a requested order whose precondition is unmet degrades to newest.
 *   Without the embeddings the anchor cannot rank: `anchor_applied` is false here, and an anchor
 *   without text falls back to nearest from the anchor's own location when it has one;
 * - `total` is exact (a count with the same conditions).
 */
import { withTransaction, type Pool, type Queryable } from '../db.ts';
import { RECORD_COLUMNS } from '../items.ts';
import { interactionAllowed, type Network } from '../network.ts';
import type { DiscoverItem, DiscoverPage, DiscoverQuery, DiscoverSort, GeoPoint } from './query.ts';

/** Metres per degree of latitude on the sphere of signals.distance_meters. */
const METERS_PER_DEGREE = (2 * Math.PI * 6371008.8) / 360;
/** At most this many words of `q` are matched (the first ones). */
export const MAX_TEXT_WORDS = 10;
/**
 * Least pg_trgm strict_word_similarity for a misspelt word to match (pg_trgm's default is 0.5):
 * 0.4 accepts scool/school, kaithl/Kaithal, dispensory/Dispensary, electricion/electrician and
 * rejects pune/Punjab, kota/Kottayam, goa/Gopalpur (measured; see docs/decisions.md).
 */
export const TEXT_SIMILARITY_THRESHOLD = 0.4;

/** The anchor cannot be used: `status` 404 (unknown) or 403 (interaction not allowed). */
export class AnchorError extends Error {
  name = 'AnchorError';
  constructor(readonly status: 403 | 404, readonly code: string, message: string) {
    super(message);
  }
}

/** Significant words of `q`: letters/digits runs, lower-cased, of 3+ characters unless all are shorter. */
export function textWords(q: string): string[] {
  const words = [...new Set(q.toLowerCase().split(/[^\p{L}\p{N}]+/u).filter(Boolean))];
  const long = words.filter((w) => w.length >= 3);
  return (long.length ? long : words).slice(0, MAX_TEXT_WORDS);
}

/** A box around `point` containing every point within `meters` of it, or null near a pole or the antimeridian. */
function boxAround(point: GeoPoint, meters: number): [number, number, number, number] | null {
  const dLat = (meters / METERS_PER_DEGREE) * 1.001;
  const minLat = point.lat - dLat;
  const maxLat = point.lat + dLat;
  if (minLat <= -90 || maxLat >= 90) return null;
  const dLng = dLat / Math.cos((Math.max(Math.abs(minLat), Math.abs(maxLat)) * Math.PI) / 180);
  if (point.lng - dLng < -180 || point.lng + dLng > 180) return null;
  return [minLat, maxLat, point.lng - dLng, point.lng + dLng];
}

/** The anchor's record (existing, not retired, allowed to relate to the searched domain). */
async function loadAnchor(db: Queryable, network: Network, query: DiscoverQuery): Promise<{ location?: GeoPoint }> {
  const { rows } = await db.query<{ item_network: string; item_domain: string; item_locations: GeoPoint[] }>(
    `SELECT item_network, item_domain, item_locations FROM signals.items WHERE item_id = $1 AND lifecycle_status <> 'retired'`,
    [query.anchorItemId]);
  const anchor = rows[0];
  if (!anchor) throw new AnchorError(404, 'anchor_not_found', `anchor_item_id ${query.anchorItemId} is not a known item`);
  if (!interactionAllowed(network, { network: anchor.item_network, domain: anchor.item_domain }, { network: query.network, domain: query.domain.name })) {
    throw new AnchorError(403, 'anchor_not_allowed', `the interaction matrix does not let ${anchor.item_domain} items discover ${query.domain.name} items`);
  }
  const first = anchor.item_locations[0];
  return { location: first ? { lat: first.lat, lng: first.lng } : undefined };
}

/**
 * Answers `query` from signals.items, page and total read in one read-only transaction (one snapshot).
 * @returns the page, with `source: native_fallback` and `degraded` as given.
 * @throws AnchorError for an unknown or disallowed anchor.
 */
export async function discoverNative(pool: Pool, network: Network, query: DiscoverQuery, degraded: boolean): Promise<DiscoverPage> {
  return withTransaction(pool, async (client) => {
    await client.query('SET TRANSACTION READ ONLY');
    await client.query(`SELECT set_config('pg_trgm.strict_word_similarity_threshold', $1, true)`, [String(TEXT_SIMILARITY_THRESHOLD)]);
    return nativeQuery(client, network, query, degraded);
  });
}

async function nativeQuery(db: Queryable, network: Network, query: DiscoverQuery, degraded: boolean): Promise<DiscoverPage> {
  const anchor = query.anchorItemId ? await loadAnchor(db, network, query) : undefined;
  const params: unknown[] = [];
  const p = (value: unknown) => `$${params.push(value)}`;
  const where = [
    `item_network = ${p(query.network)}`, `item_domain = ${p(query.domain.name)}`,
    `item_type = ${p(query.domain.itemType)}`, `lifecycle_status = 'live'`,
  ];
  if (query.anchorItemId) where.push(`item_id <> ${p(query.anchorItemId)}`);

  const words = query.q ? textWords(query.q) : [];
  for (const word of words) {
    const w = `${p(word)}::text`;
    where.push(`(search_text ILIKE '%' || ${w} || '%' OR ${w} <<% search_text)`);
  }
  for (const filter of query.filters) {
    // jsonb containment: {"f": v} for a scalar field, {"f": [v]} for an array field (contains any).
    const candidates = filter.values.map((v) => JSON.stringify({ [filter.field.name]: filter.field.kind === 'array' ? [v] : v }));
    where.push(`item_state @> ANY(${p(candidates)}::jsonb[])`);
  }
  if (query.bbox) {
    const { minLat, maxLat, minLng, maxLng } = query.bbox;
    const [a, b, c, d] = [p(minLat), p(maxLat), p(minLng), p(maxLng)];
    where.push(`signals.locations_box(item_locations) && box(point(${c}, ${a}), point(${d}, ${b}))`,
      `signals.any_location_within(item_locations, ${a}, ${b}, ${c}, ${d})`);
  }
  if (query.point && query.distanceMeters !== undefined) {
    const box = boxAround(query.point, query.distanceMeters);
    if (box) where.push(`signals.locations_box(item_locations) && box(point(${p(box[2])}, ${p(box[0])}), point(${p(box[3])}, ${p(box[1])}))`);
    where.push(`signals.nearest_location_meters(item_locations, ${p(query.point.lat)}, ${p(query.point.lng)}) <= ${p(query.distanceMeters)}`);
  }

  const centre = query.orderingCenter ?? query.point ?? anchor?.location;
  const sort = sortApplied(query.sort, words.length > 0, centre);
  const distanceFrom: GeoPoint | undefined = sort === 'nearest' ? centre
    : query.distanceMeters !== undefined ? query.point : undefined;
  const whereSql = where.join(' AND ');
  const countParams = [...params];

  const extra: string[] = [];
  let order = 'created_at DESC, item_id DESC';
  if (sort === 'relevance') {
    const rank = words.map((w) => `strict_word_similarity(${p(w)}::text, search_text)`).join(' + ');
    extra.push(`(${rank}) / ${words.length} AS score`);
    order = `score DESC, ${order}`;
  }
  if (distanceFrom) {
    extra.push(`signals.nearest_location_meters(item_locations, ${p(distanceFrom.lat)}, ${p(distanceFrom.lng)}) AS "distanceMeters"`);
    if (sort === 'nearest') order = `"distanceMeters" ASC NULLS LAST, ${order}`;
  }
  const pageSql = `SELECT ${[RECORD_COLUMNS, ...extra].join(', ')} FROM signals.items WHERE ${whereSql}
    ORDER BY ${order} LIMIT ${p(query.limit)} OFFSET ${p(query.offset)}`;

  const page = await db.query<DiscoverItem & { score?: number | null; distanceMeters?: number | null }>(pageSql, params);
  const count = await db.query<{ total: number }>(`SELECT count(*) AS total FROM signals.items WHERE ${whereSql}`, countParams);
  const items = page.rows.map(({ score, distanceMeters, ...record }) => ({
    ...record,
    ...(score != null ? { score } : {}),
    ...(distanceMeters != null ? { distanceMeters } : {}),
  }));
  return {
    meta: {
      total: count.rows[0].total, limit: query.limit, offset: query.offset, source: 'native_fallback', degraded,
      ...(query.distanceMeters !== undefined ? { distance_meters: query.distanceMeters } : {}),
      sort_applied: sort, anchor_applied: false,
    },
    items,
  };
}

/** The order used natively: the requested one when its precondition holds, else newest; inferred when omitted. */
function sortApplied(requested: DiscoverSort | undefined, hasText: boolean, centre: GeoPoint | undefined): DiscoverSort {
  if (requested === 'relevance') return hasText ? 'relevance' : 'newest';
  if (requested === 'nearest') return centre ? 'nearest' : 'newest';
  if (requested === 'newest') return 'newest';
  return hasText ? 'relevance' : centre ? 'nearest' : 'newest';
}
