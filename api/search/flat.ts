/**
 * `POST /v1/search/flat` (spec "Search service"): the same search as `/v1/search` for integrations
 * that can only send one level of keys. The flat body is restored to the nested one
 * (lib/search/flat.ts), validated against the canonical schema and answered identically.
 */
import { Router } from 'express';
import type { PlatformContext } from '../../lib/context.ts';
import { unflattenSearchBody } from '../../lib/search/flat.ts';
import { SearchError, searchBodySchema } from '../../lib/search/request.ts';
import { HttpError } from '../http/errors.ts';
import { parse } from '../http/validation.ts';
import { answerSearch } from './search.ts';

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
