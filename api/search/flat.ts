/**
 * `POST /v1/search/flat` (spec "Search service"): the same search as `/v1/search` for integrations
 * that can only send one level of keys. The flat body is restored to the nested one
 * (lib/search/flat.ts), validated against the canonical schema and answered identically.
 */
import { Router } from 'express';
import { z } from 'zod';
import type { PlatformContext } from '../../lib/context.ts';
import { unflattenSearchBody } from '../../lib/search/flat.ts';
import { SearchError, searchBodySchema } from '../../lib/search/request.ts';
import { HttpError } from '../http/errors.ts';
import { API_EXAMPLES } from '../http/openapi.ts';
import type { RouteDoc } from '../http/route-doc.ts';
import { parse } from '../http/validation.ts';
import { answerSearch, searchResponseSchema } from './search.ts';

export function flatSearchRoutes(ctx: PlatformContext): Router {
  const router = Router();
  router.post('/search/flat', async (req, res) => {
    let nested: unknown;
    try {
      nested = unflattenSearchBody(req.body);
    } catch (err) {
      if (err instanceof SearchError) throw new HttpError(err.status, err.message, { code: err.code, fields: err.fields });
      throw err;
    }
    res.json(await answerSearch(ctx, parse(searchBodySchema, nested)));
  });
  return router;
}

/** The flat body: dot-delimited canonical paths to leaf values (strings are JSON-parsed where the canonical type is not a string). */
export const flatSearchBodySchema = z.record(z.string(), z.unknown())
  .meta({ description: 'Each key is a dot-delimited path into the /v1/search body (numeric segments are array indexes); values may all be strings.' });

/** Docs of `flatSearchRoutes` (api/http/openapi.ts). */
export const flatSearchRouteDocs: RouteDoc[] = [{
  method: 'POST', path: '/v1/search/flat', summary: 'The same search with a one-level body', tags: ['search'], security: 'apiKey',
  body: {
    schema: flatSearchBodySchema,
    example: API_EXAMPLES.search_flat,
  },
  responses: { 200: { description: 'As for /v1/search', schema: searchResponseSchema } },
  errors: { 403: 'As for /v1/search', 404: 'As for /v1/search' },
}];
