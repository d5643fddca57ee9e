/**
 * Console pages for voice jobs (`/console/voice`, `/console/voice/{id}`: per-status counts, live
 * over Server-Sent Events while the job runs) and
 * saved mappings (`/console/mappings`, `/console/mappings/{id}`: list, view, edit as a new
 * version, retire — checked and stored as `PUT`/`DELETE /v1/bulk-uploads/mappings/{id}` do).
 */
import { Router, type Request, type Response } from 'express';
import { z } from 'zod';
import { createSavedMapping, getSavedMapping, listSavedMappings, retireSavedMapping, updateSavedMapping } from '../../lib/aggregator/bulk/saved-mappings.ts';
import { COUNT_NAMES, listVoiceJobs, loadVoiceJob, toJobJson } from '../../lib/aggregator/voice/jobs.ts';
import type { PlatformContext } from '../../lib/context.ts';
import { mappingOrBadRequest } from '../aggregator/bulk-uploads.ts';
import { assertDomainAllowed, type Caller } from '../http/auth.ts';
import { HttpError } from '../http/errors.ts';
import { streamChanges, type StreamCaller } from '../http/event-stream.ts';
import { parse } from '../http/validation.ts';
import { consoleRole, languageOf, renderPage, translator } from './render.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const pageQuery = z.object({ page: z.coerce.number().int().min(1).max(100_000).default(1) });
const callerOf = (res: Response) => res.locals.caller as Caller;
const FINAL_VOICE_STATUSES = new Set(['completed', 'partial', 'failed']);
/** How often an open voice-job stream reads the job (ms). */
const VOICE_EVENTS_INTERVAL_MS = 500;

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

  // The job page's live counts (Server-Sent Events, as the upload page's progress).
  router.get('/voice/:id/events', async (req, res) => {
    const id = String(req.params.id);
    const orgId = callerOf(res).orgId;
    const read = async () => {
      const record = await loadVoiceJob(ctx.pool, id.toLowerCase());
      if (!record || record.org_id !== orgId) return null;
      const job = toJobJson(record);
      return { data: { job_id: job.job_id, status: job.status, ...job.counts }, final: FINAL_VOICE_STATUSES.has(job.status) };
    };
    const first = UUID.test(id) ? await read() : null;
    if (!first) throw notFound(req, 'voice.notfound');
    await streamChanges(res, first, read, { intervalMs: VOICE_EVENTS_INTERVAL_MS, caller: res.locals.streamCaller as StreamCaller, limits: ctx.config });
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

  // A new saved mapping (e.g. the suggestions of a job's page, reviewed), then back to a new upload with it.
  router.post('/mappings', consoleRole('admin', 'operator'), async (req, res) => {
    const body = req.body as Record<string, string>;
    const type = String(body.participant_type ?? '');
    if (!ctx.network.domains.has(type)) throw new HttpError(400, translator(languageOf(req))('links.domain.invalid'), { fields: { participant_type: ['unknown'] } });
    assertDomainAllowed(res, type);
    const mapping = mappingOrBadRequest(ctx, ctx.network.domains.get(type)!, String(body.mapping ?? ''), 'mapping');
    const name = String(body.name ?? '').trim().slice(0, 200);
    if (!name) throw new HttpError(400, 'name: required', { fields: { name: ['required'] } });
    const caller = callerOf(res);
    const saved = await createSavedMapping(ctx.pool, { aggregatorId: caller.aggregatorId, name, participantType: type, mapping, createdBy: caller.subject });
    res.redirect(303, `/console/uploads?mapping=${saved.id}#new-upload`);
  });

  router.post('/mappings/:id', consoleRole('admin', 'operator'), async (req, res) => {
    const t = translator(languageOf(req));
    const id = String(req.params.id);
    const caller = callerOf(res);
    const current = UUID.test(id) ? await getSavedMapping(ctx.pool, caller.aggregatorId, id.toLowerCase()) : null;
    if (!current) throw notFound(req, 'mappings.notfound');
    assertDomainAllowed(res, current.participant_type);
    const body = req.body as Record<string, string>;
    const mapping = mappingOrBadRequest(ctx, ctx.network.domains.get(current.participant_type)!, String(body.mapping ?? ''), 'mapping');
    const name = String(body.name ?? '').trim().slice(0, 200) || current.name;
    const updated = await updateSavedMapping(ctx.pool, caller.aggregatorId, current.id, { name, mapping, createdBy: caller.subject });
    if (updated.outcome === 'not_found') throw notFound(req, 'mappings.notfound');
    if (updated.outcome === 'retired') throw new HttpError(409, t('mappings.retired'));
    res.redirect(303, `/console/mappings/${current.id}`);
  });

  router.post('/mappings/:id/retire', consoleRole('admin', 'operator'), async (req, res) => {
    const id = String(req.params.id);
    if (!UUID.test(id) || !await retireSavedMapping(ctx.pool, callerOf(res).aggregatorId, id.toLowerCase())) throw notFound(req, 'mappings.notfound');
    res.redirect(303, `/console/mappings/${id.toLowerCase()}`);
  });

  return router;
}
