/**
 * `POST /v1/search` (spec "Search service"; rules in lib/search/query.ts): semantic, structured and
 * geographic search over the index. Errors in shape A with a machine-readable code: 400
 * `invalid_request` (with per-field detail), 404 `anchor_not_found`, 403 `interaction_not_allowed`.
 */
import { Router } from 'express';
import { z } from 'zod';
import type { PlatformContext } from '../../lib/context.ts';
import { inSearchSlot, searchEngine } from '../../lib/search/engine.ts';
import { runSearch, type SearchResponse } from '../../lib/search/query.ts';
import { SearchError, searchBodySchema, SORTS, type SearchBody } from '../../lib/search/request.ts';
import { HttpError } from '../http/errors.ts';
import { API_EXAMPLES, itemRecordDoc } from '../http/openapi.ts';
import type { RouteDoc } from '../http/route-doc.ts';
import { parse } from '../http/validation.ts';

/**
 * Answers a search body already validated against `searchBodySchema`, in one of the process's
 * search slots (SEARCH_CONCURRENCY, inSearchSlot).
 * @throws HttpError 400, 403 or 404 from the search core's SearchError.
 */
export async function answerSearch(ctx: PlatformContext, body: SearchBody): Promise<SearchResponse> {
  try {
    return await inSearchSlot(ctx, async () => runSearch(await searchEngine(ctx), body));
  } catch (err) {
    if (err instanceof SearchError) throw new HttpError(err.status, err.message, { code: err.code, fields: err.fields });
    throw err;
  }
}

export function searchRoutes(ctx: PlatformContext): Router {
  const router = Router();
  router.post('/search', async (req, res) => {
    res.json(await answerSearch(ctx, parse(searchBodySchema, req.body)));
  });
  return router;
}

/** Response of `/v1/search` and `/v1/search/flat` (spec "POST /v1/search"). */
export const searchResponseSchema = z.object({
  context: z.looseObject({
    version: z.string(), messageId: z.string(), timestamp: z.string().optional(), networkId: z.string(), domain: z.string(), itemType: z.string(),
  }).meta({ description: 'the request context echoed (version defaults to 1.0.0)' }),
  message: z.object({
    items: z.array(z.object({ ...itemRecordDoc.shape, score: z.number().optional(), distanceMeters: z.number().optional() })),
    meta: z.object({ total: z.int().min(0), limit: z.int(), offset: z.int(), sort_applied: z.enum(SORTS) }),
  }),
});

/** Docs of `searchRoutes` (api/http/openapi.ts). */
export const searchRouteDocs: RouteDoc[] = [{
  method: 'POST', path: '/v1/search', summary: 'Semantic, structured and geographic search', tags: ['search'], security: 'apiKey',
  body: { schema: searchBodySchema, example: API_EXAMPLES.search },
  responses: { 200: { description: 'Live items and the order applied', schema: searchResponseSchema } },
  errors: { 403: 'The anchor item may not be related to this domain (interaction_not_allowed)', 404: 'Unknown anchor item (anchor_not_found)' },
}];
