/**
 * The `POST /v1/search` request (spec "Search service", decisions in docs/decisions.md): the zod
 * schema of the envelope and the error the search core throws for a request it cannot answer.
 */
import { z } from 'zod';
import { MAX_PAGE_DEPTH } from '../network/page-depth.ts';

export const FILTER_OPS = ['eq', 'neq', 'in', 'contains', 'contains_any', 'gt', 'gte', 'lt', 'lte'] as const;
export type FilterOp = (typeof FILTER_OPS)[number];
export const SORTS = ['relevance', 'newest', 'nearest'] as const;
export type SortOrder = (typeof SORTS)[number];

/** Limits the spec leaves open (docs/decisions.md). */
export const MAX_TEXT_LENGTH = 1000;
export const MAX_FILTERS = 20;
export const MAX_FILTER_VALUES = 100;
export const MAX_SPATIAL = 5;
export const DEFAULT_LIMIT = 20;
export const MAX_LIMIT = 100;
/** The rule of MAX_PAGE_DEPTH (lib/network/page-depth.ts), as the API docs state it. */
export const PAGE_DEPTH_NOTE = `Rows past the ${MAX_PAGE_DEPTH.toLocaleString('en')}th (offset + limit) are not returned: a page reaching past it is cut there, `
  + 'one starting past it is empty; meta.total still counts every match.';
/** The envelope version echoed when the request has none (spec "Versioning" 2). */
export const DEFAULT_VERSION = '1.0.0';

/** A GeoJSON Point (RFC 7946 §3.1.2): coordinates [longitude, latitude], an altitude is ignored. */
const pointSchema = z.strictObject({
  type: z.literal('Point'),
  coordinates: z.tuple([z.number().min(-180).max(180), z.number().min(-90).max(90)], z.number()),
});

const required = (v: unknown) => v !== undefined;

export const searchBodySchema = z.strictObject({
  context: z.looseObject({
    version: z.string().min(1).optional(),
    messageId: z.string().min(1),
    timestamp: z.string().min(1).optional(),
    networkId: z.string().min(1),
    domain: z.string().min(1),
    itemType: z.string().min(1),
  }),
  message: z.strictObject({
    intent: z.strictObject({
      textSearch: z.string().max(MAX_TEXT_LENGTH).optional(),
      item: z.strictObject({ id: z.uuid() }).optional(),
      spatial: z.array(z.strictObject({
        op: z.literal('s_dwithin'),
        geometry: pointSchema,
        distanceMeters: z.number().positive(),
      })).max(MAX_SPATIAL).optional(),
      filters: z.array(z.strictObject({
        op: z.enum(FILTER_OPS),
        target: z.string().min(1),
        value: z.unknown().refine(required, 'Required'),
      })).max(MAX_FILTERS).optional(),
      sort: z.enum(SORTS).optional(),
      orderingCenter: pointSchema.optional(),
    }),
    pagination: z.strictObject({
      limit: z.number().int().min(1).max(MAX_LIMIT).default(DEFAULT_LIMIT),
      offset: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER).default(0).meta({ description: PAGE_DEPTH_NOTE }),
    }).optional(),
  }),
});
export type SearchBody = z.output<typeof searchBodySchema>;

/**
 * A request the search core cannot answer: `status` 400 (invalid, with per-field messages keyed by
 * the body path), 403 (interaction not allowed) or 404 (unknown anchor); `code` is machine-readable.
 */
export class SearchError extends Error {
  name = 'SearchError';
  constructor(readonly status: 400 | 403 | 404 | 409, readonly code: string, message: string, readonly fields?: Record<string, string[]>) {
    super(message);
  }
}
