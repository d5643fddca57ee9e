/**
 * Voice-campaign endpoints of the aggregator service (spec "Voice job" and
 * `GET /v1/campaign/voice/{job_id}`; the rest decided in docs/decisions.md, "Voice campaigns").
 * The API validates, writes the job with its items and enqueues its dispatch chunks in one
 * transaction; tasks/voice-*.ts do the rest.
 *
 * - `POST /v1/campaign/voice`            (operator|admin, `Idempotency-Key`) → 202 job (queued)
 * - `GET  /v1/campaign/voice?page=&limit=` the organisation's jobs (both channels), newest first
 * - `GET  /v1/campaign/voice/{job_id}?items_limit=&cursor=` one voice job with a page of items;
 *   ETag / If-None-Match → 304; another organisation's job or an export job → 403; unknown → 404
 * - `GET  /v1/campaign/exports/{job_id}`  the CSV of an export job, to the aggregator that made it
 *   (another aggregator, even of the same organisation → 403; 404 until written, 410 once deleted)
 * - `POST /v1/campaign/voice/callbacks`   the provider's signed status updates (no bearer token;
 *   401 unless the `x-voice-signature` verifies)
 */
import { randomUUID } from 'node:crypto';
import { pipeline } from 'node:stream/promises';
import express, { Router, type NextFunction, type Request, type RequestHandler, type Response } from 'express';
import { LRUCache } from 'lru-cache';
import { z } from 'zod';
import {
  COUNT_NAMES, createVoiceJob, listVoiceJobs, loadVoiceJob, pollVoiceJob, requestHash, toJobJson, VOICE_CHANNELS, type PolledJob,
} from '../../lib/aggregator/voice/jobs.ts';
import { providerCallbackSchema } from '../../lib/aggregator/voice/protocol.ts';
import { voiceProviderSecret } from '../../lib/aggregator/voice/provider.ts';
import { SIGNATURE_HEADER, signatureCurrent, verifySignature } from '../../lib/aggregator/voice/signature.ts';
import type { PlatformContext } from '../../lib/context.ts';
import { ReadCache } from '../../lib/platform/read-cache.ts';
import { ObjectNotFoundError } from '../../lib/platform/storage.ts';
import { callerOf, requireRole } from '../http/auth.ts';
import { HttpError } from '../http/errors.ts';
import { JSON_TYPES, routeBody } from '../http/service-app.ts';
import { API_EXAMPLES } from '../http/openapi.ts';
import type { RouteDoc } from '../http/route-doc.ts';
import { parse, PG_INT_MAX } from '../http/validation.ts';
import { voiceCallbackThread } from './voice-callback-thread.ts';

export const VOICE_JOBS_PATH = '/v1/campaign/voice';
export const VOICE_CALLBACKS_PATH = '/v1/campaign/voice/callbacks';
/** Largest callback body: 10,000 updates of ~200 bytes. */
const CALLBACK_MAX_BYTES = 4 * 1024 * 1024;
const MAX_ITEMS = 100_000;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
// RFC 9110 token-ish: visible ASCII, as the Idempotency-Key draft (draft-ietf-httpapi-idempotency-key-header) allows.
const IDEMPOTENCY_KEY = /^[\x21-\x7e]{1,255}$/;

export const voiceJobBody = z.object({
  channel: z.enum(VOICE_CHANNELS).default('voice'),
  item_ids: z.array(z.uuid('must be a UUID')).min(1, 'at least one item id').max(MAX_ITEMS, `at most ${MAX_ITEMS} item ids`),
  metadata: z.array(z.object({ key: z.string().min(1).max(100), value: z.string().max(1000) })).max(50).default([]),
  content: z.object({
    script: z.string().min(1).max(5000).optional(),
    audio_url: z.url({ protocol: /^https?$/, error: 'must be an http(s) URL' }).max(2000).optional(),
  }).strict().optional(),
  schedule_at: z.iso.datetime({ offset: true, error: 'must be an ISO-8601 date-time with a time zone' }).optional(),
}).strict().superRefine((body, ctx) => {
  if (body.channel !== 'voice') return;
  const given = [body.content?.script, body.content?.audio_url].filter((v) => v !== undefined).length;
  if (given !== 1) ctx.addIssue({ code: 'custom', path: ['content'], message: 'a voice job needs exactly one of content.script or content.audio_url' });
});

export const voiceJobListQuery = z.object({
  page: z.coerce.number().int().min(1).max(PG_INT_MAX).default(1),
  limit: z.coerce.number().int().min(1).max(200).default(50),
});

export const voiceJobQuery = z.object({
  items_limit: z.coerce.number().int().min(1).max(1000).default(100),
  cursor: z.string().regex(/^[A-Za-z0-9_-]{1,40}$/, 'not a cursor given by this API').optional(),
});

/** The opaque items cursor: the position of the last item of a page. */
function encodeCursor(seq: number): string {
  return Buffer.from(`s${seq}`).toString('base64url');
}

function decodeCursor(cursor: string): number {
  const match = /^s(\d{1,9})$/.exec(Buffer.from(cursor, 'base64url').toString('latin1'));
  if (!match) throw new HttpError(400, 'cursor: not a cursor given by this API', { fields: { cursor: ['not a cursor given by this API'] } });
  return Number(match[1]);
}

/**
 * The job versions named by an If-None-Match header (RFC 9110 §13.1.2: a list of entity tags,
 * compared weakly, so `W/"7"` names version 7 too); `*` is handled by the caller.
 */
function taggedVersions(header: string | undefined): string[] {
  if (!header) return [];
  return header.split(',').flatMap((tag) => {
    const match = /^(?:W\/)?"(\d{1,19})"$/.exec(tag.trim());
    return match ? [match[1]] : [];
  });
}

/**
 * How many polled job pages (`<org>:<job_id>:<after seq>:<limit>`) a process holds with their
 * serialised 200 answer and the job version it shows (the least recently polled goes first): a
 * re-read that finds the job at that version skips the items and reuses the bytes.
 */
const ANSWERED_PAGES = 64;

/**
 * When this process last applied provider callbacks to each job (`performance.now()` ms), per
 * context: a page read begun before then is read again at once, in the background, so a poller
 * sees a callback's effect one read later instead of up to VOICE_POLL_MAX_AGE_MS later, and no
 * poll waits for that read (callbacks come ~10 times a second while a job dispatches).
 */
const callbacksApplied = new WeakMap<PlatformContext, LRUCache<string, number>>();
const callbackTimes = (ctx: PlatformContext) => {
  let times = callbacksApplied.get(ctx);
  if (!times) callbacksApplied.set(ctx, (times = new LRUCache<string, number>({ max: 10_000 })));
  return times;
};

function jobIdParam(req: Request, next: NextFunction): string | undefined {
  const id = String(req.params.job_id);
  if (!UUID.test(id)) {
    next();
    return undefined;
  }
  return id.toLowerCase();
}

/**
 * The voice paths that parse their own bodies, after authentication (createServiceApp
 * `ownBodyPaths`): a job body may be up to VOICE_JOB_MAX_BODY_BYTES, and a callback's signature
 * covers its exact bytes.
 */
export const VOICE_OWN_BODY_PATHS = [VOICE_JOBS_PATH, VOICE_CALLBACKS_PATH];

const invalidSignature = () => new HttpError(401, `Missing, stale or invalid ${SIGNATURE_HEADER} header: callbacks must be signed with VOICE_PROVIDER_SECRET`, { code: 'invalid_signature' });

/** `POST /v1/campaign/voice/callbacks`: mount before `bearerAuth` (the provider signs; it has no token). */
export function voiceCallbackRoutes(ctx: PlatformContext): Router {
  const router = Router();
  let secret: Promise<string> | undefined;
  const appliedAt = callbackTimes(ctx);
  const apply = voiceCallbackThread(ctx);
  // A missing, malformed or stale signature is refused before the body is read; the rest of the
  // check needs the bytes. The signature covers the exact bytes received: the callbacks' thread parses them.
  const currentSignature: RequestHandler = (req, _res, next) => next(signatureCurrent(req.header(SIGNATURE_HEADER)) ? undefined : invalidSignature());
  router.post(VOICE_CALLBACKS_PATH, currentSignature, ...routeBody(express.raw({ limit: CALLBACK_MAX_BYTES, type: JSON_TYPES })), async (req, res) => {
    const raw = Buffer.isBuffer(req.body) ? req.body : undefined;
    if (!raw || !verifySignature(await (secret ??= voiceProviderSecret(ctx.config)), req.header(SIGNATURE_HEADER), raw)) throw invalidSignature();
    // Parsed, validated and applied off this event loop, at background priority (the thread's module).
    const { accepted, ignored, jobIds } = await apply(raw);
    const now = performance.now();
    for (const jobId of jobIds) appliedAt.set(jobId, now);
    res.json({ accepted, ignored });
  });
  return router;
}

/** The voice-job routes (see the module comment), mounted under `/v1` after `bearerAuth`. */
export function voiceRoutes(ctx: PlatformContext): Router {
  const router = Router();

  const jobBody = routeBody(express.json({ limit: ctx.config.VOICE_JOB_MAX_BODY_BYTES, type: JSON_TYPES }));
  router.post('/campaign/voice', requireRole('admin', 'operator'), ...jobBody, async (req: Request, res: Response) => {
    const key = req.header('idempotency-key');
    if (key === undefined || !IDEMPOTENCY_KEY.test(key)) {
      const message = key === undefined ? 'required: a unique key per job, e.g. a UUID; the same key with the same body answers the same job'
        : 'must be 1..255 visible ASCII characters';
      throw new HttpError(400, `Idempotency-Key header ${message}`, { code: 'invalid_idempotency_key', fields: { 'Idempotency-Key': [message] } });
    }
    const body = parse(voiceJobBody, req.body ?? {});
    const caller = callerOf(res);
    const itemIds = [...new Set(body.item_ids.map((id) => id.toLowerCase()))];
    const scheduleAt = body.schedule_at ? new Date(body.schedule_at).toISOString() : null;
    const content = body.channel === 'voice' ? body.content! : {};
    const created = await createVoiceJob(ctx.pool, {
      jobId: randomUUID(), aggregatorId: caller.aggregatorId, orgId: caller.orgId, createdBy: caller.subject,
      channel: body.channel, content, metadata: body.metadata, scheduleAt, itemIds,
      idempotencyKey: key, requestHash: requestHash({ ...body, item_ids: itemIds, schedule_at: scheduleAt, content }),
      chunkItems: ctx.config.VOICE_CHUNK_ITEMS,
    });
    if (created.outcome === 'conflict') {
      throw new HttpError(409, `Idempotency-Key ${key} was used for another request (job ${created.jobId}); use a new key for a new job`, { code: 'idempotency_key_reused' });
    }
    if (created.outcome === 'replayed') res.set('idempotent-replayed', 'true');
    res.status(202).location(`${VOICE_JOBS_PATH}/${created.job.job_id}`).json(toJobJson(created.job));
  });

  router.get('/campaign/voice', async (req, res) => {
    const page = parse(voiceJobListQuery, req.query, 'query');
    const { jobs, total } = await listVoiceJobs(ctx.pool, callerOf(res).orgId, page);
    res.json({ voice_jobs: jobs, page: page.page, limit: page.limit, total, has_more: page.page * page.limit < total });
  });

  // A page of a job as read for one organisation: `owned` when it is that organisation's voice job,
  // and only then is it held for the next polls.
  type Page = { polled: PolledJob | null; body?: Buffer; owned: boolean };
  const appliedAt = callbackTimes(ctx);
  // Pages (`<org>:<job>:<after seq>:<limit>`) answer for up to VOICE_POLL_MAX_AGE_MS without
  // PostgreSQL, re-read in the background past a quarter of it, one read per page at a time
  // (lib/platform/read-cache.ts); a page read before this process last applied a callback to its
  // job is read again at once, in the background. So a page polled hundreds of times a second
  // costs PostgreSQL a few statements a second, and a poll rarely waits on PostgreSQL while
  // dispatch keeps it busy (docs/decisions.md, "Voice campaigns").
  const pages = new ReadCache<Page>({
    maxAgeMs: ctx.config.VOICE_POLL_MAX_AGE_MS, max: ANSWERED_PAGES, keep: (page) => page.owned,
    read: async (key, held) => {
      const [orgId, id, afterSeq, limit] = key.split(':');
      // The version of the page held counts as known: the statement then skips the items.
      const polled = await pollVoiceJob(ctx.pool, id, { orgId, afterSeq: Number(afterSeq), limit: Number(limit), knownVersions: held?.polled ? [held.polled.version] : [] });
      if (!polled) return { polled, owned: false };
      // No page: the job is not the caller's voice job (answered by the route), or still at the version held.
      const body = polled.page ? Buffer.from(JSON.stringify({
        ...toJobJson(polled.page.job), items: polled.page.items, items_limit: Number(limit),
        items_next_cursor: polled.page.nextSeq === null ? null : encodeCursor(polled.page.nextSeq),
      })) : held?.body;
      return { polled: { ...polled, page: null }, body, owned: body !== undefined && polled.org_id === orgId && polled.channel === 'voice' };
    },
  });
  router.get('/campaign/voice/:job_id', async (req, res, next) => {
    const id = jobIdParam(req, next);
    if (!id) return;
    const query = parse(voiceJobQuery, req.query, 'query');
    const afterSeq = query.cursor === undefined ? -1 : decodeCursor(query.cursor);
    const ifNoneMatch = req.header('if-none-match');
    const known = taggedVersions(ifNoneMatch);
    const { polled, body } = (await pages.get(`${callerOf(res).orgId}:${id}:${afterSeq}:${query.items_limit}`, appliedAt.get(id)))!;
    if (!polled) throw new HttpError(404, `No voice job ${id}`);
    if (polled.org_id !== callerOf(res).orgId) throw new HttpError(403, `Voice job ${id} belongs to another organisation`, { code: 'forbidden' });
    if (polled.channel !== 'voice') {
      throw new HttpError(403, `Job ${id} is an ${polled.channel} job, not a voice job; its CSV is at /v1/campaign/exports/${id}`, { code: 'wrong_channel' });
    }
    // The version grows with every change of the job or its items; the URL carries the page.
    res.set({ etag: `"${polled.version}"`, 'cache-control': 'private, no-cache' });
    if (known.includes(polled.version) || ifNoneMatch?.trim() === '*') {
      res.status(304).end();
      return;
    }
    // As res.json would set it, without its MIME lookup per request.
    res.setHeader('content-type', 'application/json; charset=utf-8');
    res.send(body);
  });

  // Admin and operator only, as POST /v1/dashboard/export/profiles: the CSV holds decrypted contacts (issue 15).
  router.get('/campaign/exports/:job_id', requireRole('admin', 'operator'), async (req, res, next) => {
    const id = jobIdParam(req, next);
    if (!id) return;
    const job = await loadVoiceJob(ctx.pool, id);
    if (!job) throw new HttpError(404, `No export job ${id}`);
    // The CSV holds the job's aggregator's contacts: that aggregator's, not its organisation's (Trust II).
    if (job.aggregator_id !== callerOf(res).aggregatorId) throw new HttpError(403, `Job ${id} belongs to another aggregator`, { code: 'forbidden' });
    if (job.channel !== 'export') throw new HttpError(403, `Job ${id} is a ${job.channel} job, not an export`, { code: 'wrong_channel' });
    if (job.export_purged_at) {
      throw new HttpError(410, `The CSV of export job ${id} was deleted on ${job.export_purged_at}, ${ctx.config.VOICE_EXPORT_RETENTION_DAYS} days after it was written (VOICE_EXPORT_RETENTION_DAYS); create a new export job`, { code: 'export_expired' });
    }
    if (!job.export_object_key) throw new HttpError(404, `The CSV of export job ${id} is not written yet (status ${toJobJson(job).status})`, { code: 'export_not_ready' });
    let body;
    try {
      body = await ctx.storage.get(job.export_object_key);
    } catch (err) {
      if (err instanceof ObjectNotFoundError) throw new HttpError(404, `The CSV of export job ${id} is no longer stored`, { code: 'export_not_ready' });
      throw err;
    }
    res.status(200).type('text/csv; charset=utf-8').attachment(`voice-export-${id}.csv`);
    await pipeline(body, res);
  });

  return router;
}

/** Path parameter of a voice or export job (a UUID in either case; anything else is no route: 404). */
export const voiceJobIdParams = z.object({ job_id: z.string().regex(/^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/).meta({ format: 'uuid', description: 'job id' }) });
/** A voice or export job (lib/aggregator/voice/jobs.ts `toJobJson`). */
const voiceJobSchema = z.object({
  job_id: z.uuid(), channel: z.enum(VOICE_CHANNELS), status: z.enum(['queued', 'processing', 'completed', 'partial', 'failed']),
  counts: z.object(Object.fromEntries(COUNT_NAMES.map((n) => [n, z.int()]))), created_at: z.string(), updated_at: z.string(),
  metadata: z.array(z.object({ key: z.string(), value: z.string() })), provider_response: z.unknown(),
  content: z.object({ script: z.string().optional(), audio_url: z.string().optional() }), schedule_at: z.string().nullable(), export_object_key: z.string().nullable(),
}).meta({ id: 'VoiceJob' });
const voiceJobPageSchema = voiceJobSchema.extend({
  items: z.array(z.looseObject({ item_id: z.uuid() })), items_limit: z.int(),
  items_next_cursor: z.string().nullable().meta({ description: 'pass as `cursor` for the next page of items; null on the last' }),
});
const etagHeader = z.object({ etag: z.string().meta({ description: 'the job\'s version: send it as If-None-Match' }) });

/** Docs of `voiceCallbackRoutes` (signed by the provider; no bearer token). */
export const voiceCallbackRouteDocs: RouteDoc[] = [{
  method: 'POST', path: VOICE_CALLBACKS_PATH, summary: 'Status updates of calls, signed by the voice provider', tags: ['voice'], security: 'none',
  headers: z.object({ [SIGNATURE_HEADER]: z.string().meta({ description: '`t=<unix seconds>,v1=<hex HMAC-SHA256(VOICE_PROVIDER_SECRET, "<t>.<raw body>")>` (RFC 2104)' }) }),
  body: { schema: providerCallbackSchema },
  responses: { 200: { description: 'Updates applied and ignored (unknown or stale)', schema: z.object({ accepted: z.int(), ignored: z.int() }) } },
  errors: { 401: `Missing, stale or invalid ${SIGNATURE_HEADER} header` },
}];

/** Docs of `voiceRoutes`. */
export const voiceRouteDocs: RouteDoc[] = [
  {
    method: 'POST', path: VOICE_JOBS_PATH, summary: 'Create a voice (or export) job over items', tags: ['voice'], security: 'bearer',
    description: 'Role admin or operator. The same Idempotency-Key with the same body answers the same job (header `idempotent-replayed: true`).',
    headers: z.object({ 'idempotency-key': z.string().regex(/^[\x21-\x7e]{1,255}$/).meta({ description: 'a unique key per job, e.g. a UUID' }) }),
    body: { schema: voiceJobBody, example: API_EXAMPLES.voice_job },
    responses: { 202: { description: 'Queued', schema: voiceJobSchema, headers: z.object({ location: z.string().meta({ description: 'the job\'s URL' }) }) } },
    errors: { 403: 'Role admin or operator required', 409: 'The Idempotency-Key was used for another request' },
  },
  {
    method: 'GET', path: VOICE_JOBS_PATH, summary: 'The organisation\'s jobs, newest first', tags: ['voice'], security: 'bearer', query: voiceJobListQuery,
    responses: { 200: { description: 'A page of jobs', schema: z.object({ voice_jobs: z.array(voiceJobSchema), page: z.int(), limit: z.int(), total: z.int(), has_more: z.boolean() }) } },
  },
  {
    method: 'GET', path: `${VOICE_JOBS_PATH}/:job_id`, summary: 'One voice job with a page of its items', tags: ['voice'], security: 'bearer',
    params: voiceJobIdParams, query: voiceJobQuery, headers: z.object({ 'if-none-match': z.string().optional().meta({ description: 'the ETag of an earlier answer' }) }),
    responses: {
      200: { description: 'The job and a page of items', schema: voiceJobPageSchema, headers: etagHeader },
      304: { description: 'Unchanged since the ETag sent', headers: etagHeader },
    },
    errors: { 403: 'Another organisation\'s job, or an export job', 404: 'No such job' },
  },
  {
    method: 'GET', path: '/v1/campaign/exports/:job_id', summary: 'The CSV of an export job', tags: ['voice'], security: 'bearer', params: voiceJobIdParams,
    responses: { 200: { description: 'The CSV (attachment)', content: [{ type: 'text/csv', schema: z.string() }] } },
    errors: { 403: 'Another aggregator\'s job, or not an export job', 404: 'No such job, or its CSV is not written yet', 410: 'The CSV was deleted (VOICE_EXPORT_RETENTION_DAYS)' },
  },
];
