/**
 * Console pages for voice jobs (`/console/voice`, `/console/voice/{id}`: per-status counts) and
 * saved mappings (`/console/mappings`, `/console/mappings/{id}`: list and view), read-only here;
 * they are changed through the API and `ldp mapping`.
 */
import { Router, type Request, type Response } from 'express';
import { z } from 'zod';
import { getSavedMapping, listSavedMappings } from '../../lib/aggregator/bulk/saved-mappings.ts';
import { COUNT_NAMES, listVoiceJobs, loadVoiceJob, toJobJson } from '../../lib/aggregator/voice/jobs.ts';
import type { PlatformContext } from '../../lib/context.ts';
import type { Caller } from '../http/auth.ts';
import { HttpError } from '../http/errors.ts';
import { parse } from '../http/validation.ts';
import { languageOf, renderPage, translator } from './render.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const pageQuery = z.object({ page: z.coerce.number().int().min(1).max(100_000).default(1) });
const callerOf = (res: Response) => res.locals.caller as Caller;

export function otherPages(ctx: PlatformContext): Router {
  const router = Router();
  const notFound = (req: Request, key: string) => new HttpError(404, translator(languageOf(req))(key, { id: String(req.params.id) }));

  router.get('/voice', async (req, res) => {
    const { page } = parse(pageQuery, req.query, 'query');
    const { jobs, total } = await listVoiceJobs(ctx.pool, callerOf(res).orgId, { page, limit: 50 });
    renderPage(req, res, 'voice', { jobs, total, page, hasMore: page * 50 < total });
  });

  router.get('/voice/:id', async (req, res) => {
    const id = String(req.params.id);
    const record = UUID.test(id) ? await loadVoiceJob(ctx.pool, id.toLowerCase()) : null;
    if (!record || record.org_id !== callerOf(res).orgId) throw notFound(req, 'voice.notfound');
    renderPage(req, res, 'voice-job', { job: toJobJson(record), countNames: COUNT_NAMES });
  });

  router.get('/mappings', async (req, res) => {
    const mappings = await listSavedMappings(ctx.pool, callerOf(res).aggregatorId);
    renderPage(req, res, 'mappings', { mappings });
  });

  router.get('/mappings/:id', async (req, res) => {
    const id = String(req.params.id);
    const mapping = UUID.test(id) ? await getSavedMapping(ctx.pool, callerOf(res).aggregatorId, id.toLowerCase()) : null;
    if (!mapping) throw notFound(req, 'mappings.notfound');
    renderPage(req, res, 'mapping', { mapping, json: JSON.stringify(mapping.mapping, null, 2) });
  });

  return router;
}
