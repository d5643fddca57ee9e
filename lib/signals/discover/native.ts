/**
 * Signals' native discover: the same query as the search service's `/v1/search` rules, answered
 * from `signals.items` when the search service cannot answer (sql/005_signals_discover.sql holds
 * the columns, functions and indexes it relies on).
 *
 * Rules kept alike with `/v1/search` (spec "POST /v1/search", docs/decisions.md):
 * - only live items; the anchor item itself is never a result; conditions are ANDed;
 * - text (`q`): every significant word must match a word of the item's searchable text (labels
 *   aside): a word it starts, or one of the known words most similar to it (pg_trgm similarity,
 *   from `signals.search_words`; a stricter threshold when known words start with it). Relevance
 *   is the mean over the query words of 1 for a word it starts, else that similarity;
 * - filters: the field has one of the values (array fields: contain any of them);
 * - bounding box / distance: any of the item's locations inside the box / within range;
 * - order: requested, else inferred (relevance when there is text, else nearest when there is a
 *   centre, else newest); a requested order whose precondition is unmet degrades to newest.
 *   Without the embeddings the anchor cannot rank: `anchor_applied` is false here, and an anchor
 *   without text falls back to nearest from the anchor's own location when it has one;
 * - `total` is exact (a count with the same conditions);
 * - no row past MAX_PAGE_DEPTH (offset + limit, lib/network/page-depth.ts) is returned, as in search.
 */
import { withTransaction, type Pool, type Queryable } from '../../platform/db.ts';
import { RECORD_COLUMNS } from '../../network/items.ts';
import { rowsWithinDepth } from '../../network/page-depth.ts';
import { interactionAllowed, type Network } from '../../network/config.ts';
import { boundingBox } from '../../network/geo.ts';
import type { DiscoverItem, DiscoverPage, DiscoverQuery, DiscoverSort, GeoPoint } from './query.ts';

/** At most this many words of `q` are matched (the first ones). */
export const MAX_TEXT_WORDS = 10;
/**
 * Least pg_trgm similarity for a known word to stand for a query word that no known word starts
 * with (pg_trgm's default is 0.3): 0.4 accepts scool/school, kaithl/kaithal, dispensory/dispensary,
 * electricion/electrician and rejects pune/punjab, kota/kottayam, goa/gopalpur (measured;
 * docs/decisions.md).
 */
export const WORD_SIMILARITY_THRESHOLD = 0.4;
/**
 * The same for a query word that known words start with (real data holds misspellings too, e.g.
 * "dispensry"): stricter, so that karnal does not also find karnataka (0.42) while dispensry still
 * finds dispensary (0.62).
 */
export const KNOWN_WORD_SIMILARITY_THRESHOLD = 0.5;
/** At most this many known words stand for one misspelt query word (the most similar ones). */
const MAX_WORD_VARIANTS = 20;

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

/** One query word and the tsquery terms that match it, best first, with their rank (0..1). */
interface WordMatch {
  word: string;
  alternatives: { tsquery: string; rank: number }[];
}

/** `lexeme` quoted for the tsquery input syntax. */
const quoteLexeme = (lexeme: string) => `'${lexeme.replace(/\\/g, '\\\\').replace(/'/g, "''")}'`;

/**
 * The alternatives of each query word: itself as a prefix (rank 1), then the known words most
 * similar to it that it does not start (rank: their similarity; at least WORD_SIMILARITY_THRESHOLD,
 * or KNOWN_WORD_SIMILARITY_THRESHOLD when known words start with it). Needs
 * `pg_trgm.similarity_threshold` set to WORD_SIMILARITY_THRESHOLD (the `%` operator and its index).
 */
async function matchWords(db: Queryable, words: string[]): Promise<WordMatch[]> {
  if (!words.length) return [];
  const { rows } = await db.query<{ query_word: string; word: string; similarity: number }>(
    `SELECT q.word AS query_word, v.word, v.similarity
       FROM (SELECT w COLLATE "C" AS word FROM unnest($1::text[]) AS w) AS q
       CROSS JOIN LATERAL (SELECT EXISTS (SELECT 1 FROM signals.search_words AS k
                                           WHERE k.word >= q.word AND k.word < q.word || chr(1114111)) AS known) AS k
       CROSS JOIN LATERAL (
         SELECT s.word, similarity(s.word, q.word) AS similarity FROM signals.search_words AS s
          WHERE s.word % q.word AND NOT (s.word >= q.word AND s.word < q.word || chr(1114111))
            AND similarity(s.word, q.word) >= CASE WHEN k.known THEN $2::float4 ELSE $3::float4 END
          ORDER BY similarity DESC, s.word LIMIT ${MAX_WORD_VARIANTS}) AS v`,
    [words, KNOWN_WORD_SIMILARITY_THRESHOLD, WORD_SIMILARITY_THRESHOLD]);
  return words.map((word) => ({
    word,
    alternatives: [
      { tsquery: `${quoteLexeme(word)}:*`, rank: 1 },
      ...rows.filter((r) => r.query_word === word).map((r) => ({ tsquery: quoteLexeme(r.word), rank: r.similarity })),
    ],
  }));
}

/**
 * SQL for the distance in metres from `point` (placeholders) to an item's nearest location: the
 * inlined haversine for the usual single location, signals.nearest_location_meters otherwise.
 */
function distanceSql(lat: string, lng: string): string {
  return `CASE WHEN jsonb_array_length(item_locations) = 1
    THEN signals.distance_meters(${lat}, ${lng}, (item_locations -> 0 ->> 'lat')::float8, (item_locations -> 0 ->> 'lng')::float8)
    ELSE signals.nearest_location_meters(item_locations, ${lat}, ${lng}) END`;
}

/** The anchor's record (existing, not retired, allowed to relate to the searched domain). */
async function loadAnchor(db: Queryable, network: Network, query: DiscoverQuery): Promise<{ location?: GeoPoint }> {
  const { rows } = await db.query<{ item_network: string; item_domain: string; item_locations: GeoPoint[] }>(
    `SELECT item_network, item_domain, item_locations FROM signals.items WHERE item_id = $1 AND lifecycle_status <> 'retired'`,
    [query.anchorItemId]);
  const anchor = rows[0];
  if (!anchor) throw new AnchorError(404, 'anchor_not_found', `Anchor item ${query.anchorItemId} is not a known item of network ${query.network}`);
  if (!interactionAllowed(network, { network: anchor.item_network, domain: anchor.item_domain }, { network: query.network, domain: query.domain.name })) {
    throw new AnchorError(403, 'interaction_not_allowed', `The interaction matrix does not let ${anchor.item_network}/${anchor.item_domain} items reach ${query.network}/${query.domain.name}`);
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
    await client.query(`SELECT set_config('pg_trgm.similarity_threshold', $1, true)`, [String(WORD_SIMILARITY_THRESHOLD)]);
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

  const words = query.q ? await matchWords(db, textWords(query.q)) : [];
  for (const word of words) {
    where.push(`i.search_words @@ ${p(word.alternatives.map((a) => a.tsquery).join(' | '))}::tsquery`);
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
    const box = boundingBox(query.point, query.distanceMeters);
    where.push(`signals.locations_box(item_locations) && box(point(${p(box.minLng)}, ${p(box.minLat)}), point(${p(box.maxLng)}, ${p(box.maxLat)}))`);
    where.push(`${distanceSql(`${p(query.point.lat)}::float8`, `${p(query.point.lng)}::float8`)} <= ${p(query.distanceMeters)}`);
  }

  const centre = query.orderingCenter ?? query.point ?? anchor?.location;
  const sort = sortApplied(query.sort, words.length > 0, centre);
  const distanceFrom: GeoPoint | undefined = sort === 'nearest' ? centre
    : query.distanceMeters !== undefined ? query.point : undefined;
  const whereSql = where.join(' AND ');
  const countParams = [...params];

  const extra: string[] = [];
  // Qualified: RECORD_COLUMNS outputs created_at as text, and ordering by the column uses its index.
  let order = 'i.created_at DESC, i.item_id DESC';
  if (sort === 'relevance') {
    const rank = words.map((w) => `CASE ${w.alternatives.map((a) => `WHEN i.search_words @@ ${p(a.tsquery)}::tsquery THEN ${p(a.rank)}::float8`).join(' ')} ELSE 0 END`)
      .join(' + ');
    extra.push(`(${rank}) / ${words.length} AS score`);
    order = `score DESC, ${order}`;
  }
  if (distanceFrom) {
    extra.push(`${distanceSql(`${p(distanceFrom.lat)}::float8`, `${p(distanceFrom.lng)}::float8`)} AS "distanceMeters"`);
    if (sort === 'nearest') order = `"distanceMeters" ASC NULLS LAST, ${order}`;
  }
  const take = rowsWithinDepth(query.offset, query.limit);
  const pageSql = `SELECT ${[RECORD_COLUMNS, ...extra].join(', ')} FROM signals.items AS i WHERE ${whereSql}
    ORDER BY ${order} LIMIT ${p(take)} OFFSET ${p(query.offset)}`;

  const page = take > 0
    ? await db.query<DiscoverItem & { score?: number | null; distanceMeters?: number | null }>(pageSql, params)
    : { rows: [] };
  const count = await db.query<{ total: number }>(`SELECT count(*) AS total FROM signals.items AS i WHERE ${whereSql}`, countParams);
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
