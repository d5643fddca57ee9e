/**
 * `POST /api/v1/network/item/discover` (spec "Signals service"): network-wide discovery of live
 * items by text, filters, bounding box, distance, ordering point and anchor item.
 *
 * Asks the search service (timeout SEARCH_TIMEOUT_MS) and answers `source: signals_search`; when it
 * times out, refuses the connection or fails (5xx, or a 4xx that is the platform's own fault: see
 * lib/search-client.ts), answers from signals' own items with `source: native_fallback,
 * degraded: true`. Any other 4xx of the search service (e.g. an unknown anchor) is the caller's
 * problem and answered as discover's own error (shape A, same status and code).
 */
import { Router } from 'express';
import { z } from 'zod';
import type { PlatformContext } from '../../lib/context.ts';
import { AnchorError, discoverNative } from '../../lib/signals/discover/native.ts';
import {
  DISCOVER_SORTS, locationFields, type DiscoverFilter, type DiscoverPage, type DiscoverQuery,
} from '../../lib/signals/discover/query.ts';
import { discoverViaSearch } from '../../lib/signals/discover/search-path.ts';
import type { FieldInfo, Network } from '../../lib/network/config.ts';
import { SearchRejectedError, SearchUnavailableError } from '../../lib/clients/search-client.ts';
import { MAX_FILTERS as SEARCH_MAX_FILTERS, MAX_FILTER_VALUES, MAX_TEXT_LENGTH, PAGE_DEPTH_NOTE } from '../../lib/search/request.ts';
import { itemRecordSchema } from '../../lib/network/items.ts';
import { HttpError, type FieldErrors } from '../http/errors.ts';
import { API_EXAMPLES } from '../http/openapi.ts';
import type { RouteDoc } from '../http/route-doc.ts';
import { parse, summarise } from '../http/validation.ts';

/**
 * Limits the spec leaves open: those of the search service's request, which discover must fit in;
 * four of its filters are kept for a bounding box (docs/decisions.md).
 */
export const MAX_Q_LENGTH = MAX_TEXT_LENGTH;
export const MAX_FILTERS = SEARCH_MAX_FILTERS - 4;

const lat = z.number().min(-90).max(90);
const lng = z.number().min(-180).max(180);

export const discoverRequestSchema = z.strictObject({
  item_network: z.string().min(1),
  item_domain: z.string().min(1),
  item_type: z.string().min(1),
  q: z.string().min(1).max(MAX_Q_LENGTH).refine((s) => s.trim() !== '', 'must not be blank').optional(),
  filters: z.array(z.strictObject({
    field: z.string().min(1),
    values: z.array(z.union([z.string(), z.number(), z.boolean()])).min(1).max(MAX_FILTER_VALUES),
  })).max(MAX_FILTERS).optional(),
  sort: z.enum(DISCOVER_SORTS).optional(),
  item_latitude: lat.optional(),
  item_longitude: lng.optional(),
  min_lat: lat.optional(),
  max_lat: lat.optional(),
  min_lng: lng.optional(),
  max_lng: lng.optional(),
  distance_meters: z.number().positive().optional(),
  ordering_latitude: lat.optional(),
  ordering_longitude: lng.optional(),
  anchor_item_id: z.uuid().optional(),
  limit: z.number().int().min(1).max(100).default(20),
  offset: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER).default(0).meta({ description: PAGE_DEPTH_NOTE }),
});
type DiscoverRequest = z.output<typeof discoverRequestSchema>;

/** `value` converted to `kind` (numeric and boolean strings are accepted for those kinds), or an error message. */
function convertFilterValue(field: FieldInfo, value: string | number | boolean): { value: string | number | boolean } | { error: string } {
  const kind = field.kind === 'array' ? field.itemKind ?? 'string' : field.kind;
  let converted: string | number | boolean | undefined;
  if (kind === 'string') converted = typeof value === 'string' ? value : undefined;
  else if (kind === 'boolean') converted = typeof value === 'boolean' ? value : value === 'true' ? true : value === 'false' ? false : undefined;
  else {
    const n = typeof value === 'number' ? value : typeof value === 'string' && value.trim() !== '' ? Number(value) : NaN;
    converted = Number.isFinite(n) && (kind !== 'integer' || Number.isInteger(n)) ? n : undefined;
  }
  if (converted === undefined) return { error: `expected ${kind === 'integer' ? 'an integer' : `a ${kind}`} for ${field.name}` };
  if (field.enum && !field.enum.includes(converted as string | number)) return { error: `must be one of ${field.enum.join(', ')}` };
  return { value: converted };
}

/**
 * Checks `body` against the network (identity values, filter fields and values) and the rules
 * between fields (pairs given together, box corners ordered, a distance needs its centre).
 * @throws HttpError 400 `invalid_request` naming every bad field.
 */
function resolveQuery(network: Network, body: DiscoverRequest): DiscoverQuery {
  const fields: FieldErrors = {};
  const problem = (field: string, message: string) => (fields[field] ??= []).push(message);
  if (body.item_network !== network.id) problem('item_network', `must be ${network.id}`);
  const domain = network.domains.get(body.item_domain);
  if (!domain) problem('item_domain', `must be one of ${[...network.domains.keys()].join(', ')}`);
  else if (body.item_type !== domain.itemType) problem('item_type', `${domain.name} items have item_type ${domain.itemType}`);

  const pair = (a: keyof DiscoverRequest, b: keyof DiscoverRequest) => {
    if ((body[a] === undefined) !== (body[b] === undefined)) problem(body[a] === undefined ? a : b, `required with ${body[a] === undefined ? b : a}`);
  };
  pair('item_latitude', 'item_longitude');
  pair('ordering_latitude', 'ordering_longitude');
  if (body.distance_meters !== undefined && body.item_latitude === undefined && body.item_longitude === undefined) {
    problem('distance_meters', 'requires item_latitude and item_longitude (the centre of the distance)');
  }
  const corners = [body.min_lat, body.max_lat, body.min_lng, body.max_lng];
  const hasBox = corners.some((c) => c !== undefined);
  if (hasBox) {
    for (const key of ['min_lat', 'max_lat', 'min_lng', 'max_lng'] as const) {
      if (body[key] === undefined) problem(key, 'a bounding box needs all of min_lat, max_lat, min_lng and max_lng');
    }
    if (body.min_lat !== undefined && body.max_lat !== undefined && body.min_lat > body.max_lat) problem('min_lat', 'must not exceed max_lat');
    if (body.min_lng !== undefined && body.max_lng !== undefined && body.min_lng > body.max_lng) {
      problem('min_lng', 'must not exceed max_lng (a box across the antimeridian is not supported)');
    }
    if (domain && !locationFields(domain)) problem('min_lat', `${domain.name} items declare no location fields to bound`);
  }

  const filters: DiscoverFilter[] = [];
  for (const [i, f] of (body.filters ?? []).entries()) {
    const field = domain?.fields.find((x) => x.name === f.field && !x.private);
    if (!field) {
      if (domain) problem(`filters.${i}.field`, `unknown field "${f.field}"; one of ${domain.fields.filter((x) => !x.private).map((x) => x.name).join(', ')}`);
      continue;
    }
    const values: DiscoverFilter['values'] = [];
    for (const [j, v] of f.values.entries()) {
      const result = convertFilterValue(field, v);
      if ('error' in result) problem(`filters.${i}.values.${j}`, result.error);
      else values.push(result.value);
    }
    filters.push({ field, values });
  }

  if (Object.keys(fields).length) throw new HttpError(400, `Invalid request body: ${summarise(fields)}`, { code: 'invalid_request', fields });
  const at = (la?: number, ln?: number) => (la !== undefined && ln !== undefined ? { lat: la, lng: ln } : undefined);
  return {
    network: body.item_network, domain: domain!, q: body.q?.trim(), filters, sort: body.sort,
    point: at(body.item_latitude, body.item_longitude), distanceMeters: body.distance_meters,
    bbox: hasBox ? { minLat: body.min_lat!, maxLat: body.max_lat!, minLng: body.min_lng!, maxLng: body.max_lng! } : undefined,
    orderingCenter: at(body.ordering_latitude, body.ordering_longitude),
    anchorItemId: body.anchor_item_id, limit: body.limit, offset: body.offset,
  };
}

export function discoverRoutes(ctx: PlatformContext): Router {
  const router = Router();
  router.post('/network/item/discover', async (req, res) => {
    const query = resolveQuery(ctx.network, parse(discoverRequestSchema, req.body ?? {}));
    let page: DiscoverPage;
    try {
      page = await discoverViaSearch(ctx, query);
    } catch (err) {
      if (err instanceof SearchRejectedError) throw new HttpError(err.status, err.message, { code: err.code });
      if (!(err instanceof SearchUnavailableError)) throw err;
      req.log.warn({ reason: err.reason, status: err.status, detail: err.message }, 'search service unavailable: discover answers natively');
      try {
        page = await discoverNative(ctx.pool, ctx.network, query, true);
      } catch (nativeErr) {
        if (nativeErr instanceof AnchorError) throw new HttpError(nativeErr.status, nativeErr.message, { code: nativeErr.code });
        throw nativeErr;
      }
    }
    res.json(page);
  });
  return router;
}

/** A discover page (spec: meta and item records; lifecycle_status optional there). */
export const discoverResponseSchema = z.object({
  meta: z.object({
    total: z.int().min(0),
    limit: z.int(),
    offset: z.int(),
    source: z.enum(['signals_search', 'native_fallback']),
    degraded: z.boolean(),
    distance_meters: z.number().optional(),
    sort_applied: z.enum(DISCOVER_SORTS),
    anchor_applied: z.boolean(),
  }),
  items: z.array(itemRecordSchema.extend({
    lifecycle_status: z.string().optional(),
    score: z.number().optional(),
    distanceMeters: z.number().optional(),
  })),
});

/** Docs of `discoverRoutes` (api/http/openapi.ts). */
export const discoverRouteDocs: RouteDoc[] = [{
  method: 'POST', path: '/api/v1/network/item/discover', summary: 'Discover live items by text, filters, place, order and anchor', tags: ['discover'],
  security: 'apiKey',
  description: 'Answered by the search service (`source: signals_search`); when it is unreachable or fails, by signals\' own query (`source: native_fallback`, `degraded: true`).',
  body: {
    schema: discoverRequestSchema,
    example: API_EXAMPLES.discover,
  },
  responses: { 200: { description: 'A page of items', schema: discoverResponseSchema } },
  errors: { 403: 'The anchor item may not be related to this domain (interaction matrix)', 404: 'Unknown anchor item' },
}];
