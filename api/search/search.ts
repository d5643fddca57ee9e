/**
 * `POST /v1/search` (spec "Search service"; rules in lib/search/query.ts): semantic, structured and
 * geographic search over the index. Errors in shape A with a machine-readable code: 400
 * `invalid_request` (with per-field detail), 404 `anchor_not_found`, 403 `interaction_not_allowed`.
 */
import { Router } from 'express';
import type { PlatformContext } from '../../lib/context.ts';
import { searchEngine } from '../../lib/search/engine.ts';
import { runSearch, type SearchResponse } from '../../lib/search/query.ts';
import { SearchError, searchBodySchema, type SearchBody } from '../../lib/search/request.ts';
import { HttpError } from '../http/errors.ts';
import { parse } from '../http/validation.ts';

/**
 * Answers a search body already validated against `searchBodySchema`.
 * @throws HttpError 400, 403 or 404 from the search core's SearchError.
 */
export async function answerSearch(ctx: PlatformContext, body: SearchBody): Promise<SearchResponse> {
  try {
    return await runSearch(await searchEngine(ctx), body);
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
