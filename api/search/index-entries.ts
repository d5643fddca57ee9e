/**
 * Internal endpoint of the search service (not in the spec; docs/decisions.md): the index entries of
 * some items, for signals' match score, which must never read the `search` schema itself.
 *
 * `POST /v1/index/entries` — header x-api-key, and only the platform's internal key
 * (`ctx.internalApiKey`) is accepted: embeddings are internal data (403 `internal_only` otherwise).
 * Request: `{ids: uuid[]}` (1..100 distinct ids).
 * Response 200: `{entries: [{item, model, embedding, indexed_at}]}`, one per indexed id, in request
 * order; ids that are not indexed are absent (retired items are never indexed). `item` is the item
 * record as indexed (with `lifecycle_status`; `updated_at` is the item's time at signals), `model`
 * the embedding model version {model_id, quantization, dimensions}, `embedding` the unit vector.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { Router, type RequestHandler } from 'express';
import { z } from 'zod';
import type { PlatformContext } from '../../lib/context.ts';
import type { IndexEntry } from '../../lib/clients/search-client.ts';
import { HttpError } from '../http/errors.ts';
import { itemRecordDoc } from '../http/openapi.ts';
import type { RouteDoc } from '../http/route-doc.ts';
import { parse } from '../http/validation.ts';

export const MAX_INDEX_ENTRY_IDS = 100;

export const indexEntriesRequestSchema = z.strictObject({
  ids: z.array(z.uuid()).min(1).max(MAX_INDEX_ENTRY_IDS)
    .refine((ids) => new Set(ids).size === ids.length, 'ids must be distinct'),
});

const digest = (value: string) => createHash('sha256').update(value).digest();

/** 403 unless the request carries the platform's internal key (after `apiKeyAuth`). */
function internalKeyOnly(ctx: PlatformContext): RequestHandler {
  const expected = digest(ctx.internalApiKey);
  return (req, _res, next) => {
    if (!timingSafeEqual(digest(req.header('x-api-key') ?? ''), expected)) {
      throw new HttpError(403, 'This endpoint is internal to the platform', { code: 'internal_only' });
    }
    next();
  };
}

export function indexEntryRoutes(ctx: PlatformContext): Router {
  const router = Router();
  router.post('/index/entries', internalKeyOnly(ctx), async (req, res) => {
    const { ids } = parse(indexEntriesRequestSchema, req.body);
    const { rows } = await ctx.pool.query<IndexEntry>(
      `SELECT json_build_object(
                'item_network', item_network, 'item_domain', item_domain, 'item_type', item_type, 'item_id', item_id,
                'item_state', item_state, 'item_locations', item_locations, 'item_instance_url', item_instance_url,
                'item_schema_url', item_schema_url, 'created_by', created_by,
                'created_at', to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                'updated_at', to_char(source_updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
                'lifecycle_status', lifecycle_status) AS item,
              json_build_object('model_id', model_id, 'quantization', model_quantization, 'dimensions', model_dimensions) AS model,
              search.embedding_array(embedding) AS embedding,
              to_char(indexed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS indexed_at
         FROM search.items WHERE item_id = ANY($1::uuid[])
        ORDER BY array_position($1::uuid[], item_id)`,
      [ids],
    );
    // Stored in half precision (sql/015_search_f16.sql), unit length only to ~1e-4: normalised again.
    for (const row of rows) {
      const norm = Math.hypot(...row.embedding) || 1;
      row.embedding = row.embedding.map((x) => x / norm);
    }
    res.json({ entries: rows });
  });
  return router;
}

export const indexEntriesResponseSchema = z.object({
  entries: z.array(z.object({
    item: itemRecordDoc,
    model: z.object({ model_id: z.string(), quantization: z.string(), dimensions: z.int() }),
    embedding: z.array(z.number()),
    indexed_at: z.string().meta({ format: 'date-time' }),
  })),
});

/** Docs of `indexEntryRoutes` (api/http/openapi.ts). */
export const indexEntryRouteDocs: RouteDoc[] = [{
  method: 'POST', path: '/v1/index/entries', summary: 'Index entries of some items (internal: the platform\'s own key only)', tags: ['internal'],
  security: 'apiKey', body: { schema: indexEntriesRequestSchema },
  responses: { 200: { description: 'One entry per indexed id, in request order', schema: indexEntriesResponseSchema } },
  errors: { 403: 'Not the platform\'s internal key (internal_only)' },
}];
