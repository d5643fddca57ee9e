/**
 * Bulk-upload endpoints of the aggregator service (spec "Bulk-upload job", `POST …/{id}/start`;
 * the rest decided in docs/decisions.md, "Bulk onboarding"). The API only stores the file,
 * records the job and enqueues; tasks/bulk-upload-*.ts do the onboarding.
 *
 * - `POST /v1/bulk-uploads`             multipart: participant_type, file (CSV or XLSX), column_map? | mapping_id (+ mapping_version?),
 *   mode? (create | upsert | update), sync? → 201 job (pending)
 * - `GET  /v1/bulk-uploads?page=&limit=` the caller's jobs, newest first
 * - `GET  /v1/bulk-uploads/{id}`        one job, with its counters
 * - `POST /v1/bulk-uploads/{id}/start`  {attestation: true, confirm_pause?, allow_large_pause?} → running (idempotent on
 *   running/completed; 409 when failed; a sync job needs the pause count of its whole-file dry run)
 * - `GET  /v1/bulk-uploads/{id}/errors` the error-report CSV (404 when there is none)
 * - `POST /v1/bulk-uploads/{id}/match`  mapping suggestions for the file's header, as the worker stored them
 *   (lib/aggregator/bulk/suggest.ts; admin and operator, MATCH_RATE per aggregator)
 * - `POST /v1/bulk-uploads/{id}/preview` {rows?: 1..1000 (200)} dry run of a pending job by the worker: 200 with the
 *   outcomes when done within BULK_PREVIEW_WAIT_MS, else 202 with the preview to poll
 * - `GET  /v1/bulk-uploads/{id}/previews/{preview_id}` a dry run (pending or completed)
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import busboy from 'busboy';
import { Router, type NextFunction, type Request, type Response } from 'express';
import { RateLimiterPostgres, RateLimiterRes } from 'rate-limiter-flexible';
import { z } from 'zod';
import { detectTableFormat, FORMAT_SNIFF_BYTES, unsupportedFileMessage } from '../../lib/aggregator/bulk/file-type.ts';
import { MappingError, type Mapping } from '../../lib/aggregator/bulk/mapping.ts';
import { parseMapping } from '../../lib/aggregator/bulk/parse-mapping.ts';
import { getSavedMapping } from '../../lib/aggregator/bulk/saved-mappings.ts';
import { createPreview, getPreview, MAX_PREVIEW_ROWS, type PreviewJson } from '../../lib/aggregator/bulk/preview.ts';
import { UPLOAD_MODES, type UploadMode } from '../../lib/aggregator/bulk/upsert.ts';
import { enqueueSuggestions, loadSuggestions } from '../../lib/aggregator/bulk/suggest.ts';
import type { Domain } from '../../lib/network/config.ts';
import {
  BULK_UPLOAD_STATUSES, createBulkUpload, getBulkUpload, type BulkUploadJson, listBulkUploads,
  sourceObjectKey, startBulkUpload,
} from '../../lib/aggregator/bulk/upload-jobs.ts';
import type { PlatformContext } from '../../lib/context.ts';
import { withTransaction } from '../../lib/platform/db.ts';
import { ObjectNotFoundError, type ObjectStorage } from '../../lib/platform/storage.ts';
import { assertDomainAllowed, callerOf, requireRole } from '../http/auth.ts';
import { HttpError } from '../http/errors.ts';
import { API_EXAMPLES } from '../http/openapi.ts';
import type { RouteDoc } from '../http/route-doc.ts';
import { parse, PG_INT_MAX } from '../http/validation.ts';

const MAX_COLUMN_MAP_BYTES = 64 * 1024;
/** `POST …/match` calls per aggregator per minute (a read of stored suggestions, with a bounded wait for them). */
export const MATCH_RATE = { points: 30, durationSeconds: 60 };
/** Any UUID, either case (JSON Schema patterns have no flags, so the classes say it). */
const UUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

export const listQuery = z.object({
  page: z.coerce.number().int().min(1).max(PG_INT_MAX).default(1),
  limit: z.coerce.number().int().min(1).max(200).default(50),
});
export const previewBody = z.object({
  rows: z.number().int().min(1).max(MAX_PREVIEW_ROWS, `at most ${MAX_PREVIEW_ROWS} rows`).default(200),
});
const PREVIEW_POLL_MS = 50;
export const startBody = z.looseObject({
  attestation: z.literal(true, { error: 'attestation must be true: the operator attests their authority to upload these participants' }),
  confirm_pause: z.number().int().min(0).max(PG_INT_MAX).optional()
    .meta({ description: 'sync uploads: the count of participants to pause that the job\'s dry run reported' }),
  allow_large_pause: z.boolean().optional()
    .meta({ description: 'sync uploads: allow pausing more than BULK_SYNC_MAX_PAUSE_FRACTION of the domain\'s participants' }),
});
export const columnMapSchema = z.record(z.string().min(1).max(200), z.string().min(1).nullable())
  .refine((m) => Object.keys(m).length <= 500, 'at most 500 columns');

interface ReceivedFile {
  name: string | null;
  size: number;
  head: Buffer;
  /** Larger than the limit: the stored object is incomplete and must go. */
  tooLarge: boolean;
}

interface ReceivedForm {
  fields: Map<string, string>;
  file?: ReceivedFile;
  /** The first problem seen while reading (reported once the body has been read). */
  problem?: HttpError;
}

/**
 * Reads a multipart body with busboy, streaming the part named `file` into `storage` under `key`
 * (never held in memory) and keeping its first bytes. Fields may come before or after the file;
 * `checkField` validates each one as it arrives, and once it has found a problem a later file is
 * discarded unread. Resolves after the whole body has been read and the object written.
 */
function receiveForm(req: IncomingMessage, storage: ObjectStorage, key: string, maxBytes: number,
  checkField: (name: string, value: string) => HttpError | undefined): Promise<ReceivedForm> {
  return new Promise((resolve, reject) => {
    let bb: busboy.Busboy;
    try {
      bb = busboy({
        headers: req.headers,
        limits: { files: 1, fields: 10, parts: 12, fieldSize: MAX_COLUMN_MAP_BYTES, fileSize: maxBytes + 1 },
      });
    } catch (err) {
      reject(new HttpError(400, `Malformed multipart/form-data request: ${(err as Error).message}`, { code: 'invalid_multipart' }));
      return;
    }
    const form: ReceivedForm = { fields: new Map() };
    let storing: Promise<unknown> = Promise.resolve();
    const fail = (problem: HttpError) => { form.problem ??= problem; };
    bb.on('field', (name, value, info) => {
      if (info.valueTruncated) fail(new HttpError(400, `Field ${name} is longer than ${MAX_COLUMN_MAP_BYTES} bytes`, { fields: { [name]: ['too long'] } }));
      form.fields.set(name, value);
      const problem = checkField(name, value);
      if (problem) fail(problem);
    });
    bb.on('file', (name, stream, info) => {
      if (name !== 'file') {
        fail(new HttpError(400, `Unexpected file field ${name}; send the table as the field "file"`, { fields: { [name]: ['unexpected file'] } }));
        stream.resume();
        return;
      }
      if (form.problem) {
        stream.resume();
        return;
      }
      const file: ReceivedFile = { name: info.filename ?? null, size: 0, head: Buffer.alloc(0), tooLarge: false };
      form.file = file;
      const heads: Buffer[] = [];
      let headLength = 0;
      const tap = new Transform({
        transform(chunk: Buffer, _enc, done) {
          file.size += chunk.length;
          if (headLength < FORMAT_SNIFF_BYTES) {
            heads.push(chunk.subarray(0, FORMAT_SNIFF_BYTES - headLength));
            headLength += Math.min(chunk.length, FORMAT_SNIFF_BYTES - headLength);
          }
          done(null, chunk);
        },
        flush(done) {
          file.head = Buffer.concat(heads);
          done();
        },
      });
      stream.on('limit', () => { file.tooLarge = true; });
      storing = Promise.all([pipeline(stream, tap).catch(() => {}), storage.put(key, tap)]);
    });
    bb.on('filesLimit', () => fail(new HttpError(400, 'Send exactly one file, in the field "file"', { fields: { file: ['only one file allowed'] } })));
    bb.on('fieldsLimit', () => fail(new HttpError(400, 'Too many form fields')));
    bb.on('partsLimit', () => fail(new HttpError(400, 'Too many form parts')));
    bb.on('error', (err) => {
      req.unpipe(bb);
      req.resume();
      storing.finally(() => reject(new HttpError(400, `Malformed multipart/form-data request: ${(err as Error).message}`, { code: 'invalid_multipart' })))
        .catch(() => {});
    });
    bb.on('close', () => {
      storing.then(() => resolve(form), (err) => reject(err));
    });
    req.on('aborted', () => bb.destroy(new Error('the client aborted the request')));
    req.on('error', (err) => bb.destroy(err));
    req.pipe(bb);
  });
}

function badField(field: string, message: string): HttpError {
  return new HttpError(400, `${field}: ${message}`, { fields: { [field]: [message] } });
}

/**
 * `raw` (JSON text or a parsed value) checked as a mapping for `domain`; a problem is a 400 naming
 * `param` and, for a field spec, the field (`column_map.category`).
 */
export function mappingOrBadRequest(ctx: PlatformContext, domain: Domain, raw: unknown, param: string): Mapping {
  let json = raw;
  if (typeof raw === 'string') {
    try {
      json = JSON.parse(raw);
    } catch {
      throw badField(param, 'is not JSON: expected an object of file header → schema field name (or null), or schema field name → field spec');
    }
  }
  try {
    return parseMapping(ctx.network, domain, json);
  } catch (err) {
    if (!(err instanceof MappingError)) throw err;
    throw badField(err.field === null ? param : `${param}.${err.field}`, err.message);
  }
}

/** The saved mapping `mappingId` (newest version, or `rawVersion`) for an upload of `domain`; 400 naming mapping_id when unusable. */
async function savedMappingFor(ctx: PlatformContext, aggregatorId: string, domain: Domain, mappingId: string, rawVersion: string | undefined) {
  if (!UUID.test(mappingId)) throw badField('mapping_id', 'must be the id of a saved mapping (a UUID)');
  let version: number | undefined;
  if (rawVersion !== undefined && rawVersion.trim() !== '') {
    version = Number(rawVersion);
    if (!Number.isInteger(version) || version < 1) throw badField('mapping_version', 'must be a version number (1, 2, …)');
  }
  const saved = await getSavedMapping(ctx.pool, aggregatorId, mappingId.toLowerCase(), version);
  if (!saved) throw badField(version ? 'mapping_version' : 'mapping_id', `no saved mapping ${mappingId}${version ? ` version ${version}` : ''}`);
  if (saved.retired_at) throw badField('mapping_id', `the saved mapping ${saved.name} (${mappingId}) is retired`);
  if (saved.participant_type !== domain.name) {
    throw badField('mapping_id', `the saved mapping ${saved.name} is for ${saved.participant_type} participants, not ${domain.name}`);
  }
  // Checked again: the schema may have changed since the mapping was saved.
  const columnMap = mappingOrBadRequest(ctx, domain, saved.mapping, 'mapping_id');
  return { columnMap, saved: { id: saved.id, version: saved.version }, mode: saved.mode };
}

/**
 * The `mode` and `sync` form fields of an upload (issue 30), `fallback` (the saved mapping's mode,
 * else create) when mode is absent. @throws HttpError 400 naming the field
 */
function uploadMode(fields: Map<string, string>, fallback: UploadMode): { mode: UploadMode; sync: boolean } {
  const rawMode = fields.get('mode')?.trim().toLowerCase() || fallback;
  if (!(UPLOAD_MODES as readonly string[]).includes(rawMode)) {
    throw badField('mode', `must be one of ${UPLOAD_MODES.join(', ')}: create adds new participants, upsert adds and updates, update changes existing ones only`);
  }
  const rawSync = fields.get('sync')?.trim().toLowerCase() ?? '';
  if (!['', 'true', 'false'].includes(rawSync)) throw badField('sync', 'must be true or false');
  const sync = rawSync === 'true';
  if (sync && rawMode !== 'upsert') throw badField('sync', `sync needs mode upsert (the file is the whole list), not ${rawMode}`);
  return { mode: rawMode as UploadMode, sync };
}

/** The path of a job's routes: a UUID (any other value answers the 404 of an unknown route). */
export const uploadIdParams = z.object({ id: z.string().regex(UUID).meta({ format: 'uuid', description: 'bulk-upload job id' }) });
/** Calls `next()` (another route, or the 404 handler) unless the path id can name a job. */
function uuidParam(req: Request, next: NextFunction): string | undefined {
  const id = String(req.params.id);
  if (!uploadIdParams.safeParse({ id }).success) {
    next();
    return undefined;
  }
  return id.toLowerCase();
}

/**
 * Receives a multipart upload (participant_type, file, column_map? | mapping_id + mapping_version?)
 * for the caller in `res.locals.caller`, stores the file and records the pending job; the API's
 * `POST /v1/bulk-uploads` and the operator console's upload form both use it.
 * @throws HttpError 400/403/413/415 naming the field (nothing is left behind)
 */
export function receiveBulkUpload(ctx: PlatformContext): (req: Request, res: Response) => Promise<BulkUploadJson> {
  const maxBytes = ctx.config.BULK_UPLOAD_MAX_BYTES;
  return async (req, res) => {
    if (!req.is('multipart/form-data')) {
      throw new HttpError(415, 'Content-Type must be multipart/form-data with the fields participant_type, file and optionally column_map or mapping_id');
    }
    const caller = callerOf(res);
    const uploadId = randomUUID();
    const key = sourceObjectKey(caller.aggregatorId, uploadId);
    const checkField = (name: string, value: string): HttpError | undefined => {
      if (name === 'participant_type') {
        if (!ctx.network.domains.has(value)) return badField('participant_type', `must be one of ${[...ctx.network.domains.keys()].join(', ')}`);
        try {
          assertDomainAllowed(res, value);
        } catch (err) {
          return err as HttpError;
        }
      }
      return undefined;
    };
    // Nothing is left behind by a refused upload: no job row, no object.
    const cleanup = () => ctx.storage.delete(key).catch(() => {});
    let form: ReceivedForm;
    try {
      form = await receiveForm(req, ctx.storage, key, maxBytes, checkField);
    } catch (err) {
      await cleanup();
      throw err instanceof HttpError ? err : new HttpError(400, `The upload did not complete: ${(err as Error).message}`, { code: 'upload_incomplete' });
    }
    try {
      if (form.problem) throw form.problem;
      const participantType = form.fields.get('participant_type');
      if (!participantType) throw badField('participant_type', `required: one of ${[...callerOf(res).domains].join(', ')}`);
      const domain = ctx.network.domains.get(participantType)!;
      let columnMap: Mapping | null = null;
      let saved: { id: string; version: number } | undefined;
      let mode: UploadMode = 'create';
      let sync = false;
      const rawMap = form.fields.get('column_map');
      const mappingId = form.fields.get('mapping_id')?.trim();
      if (rawMap !== undefined && rawMap.trim() !== '') {
        if (mappingId) throw badField('mapping_id', 'give either column_map or mapping_id, not both');
        columnMap = mappingOrBadRequest(ctx, domain, rawMap, 'column_map');
      } else if (mappingId) {
        ({ columnMap, saved, mode } = await savedMappingFor(ctx, caller.aggregatorId, domain, mappingId, form.fields.get('mapping_version')));
      }
      ({ mode, sync } = uploadMode(form.fields, mode));
      const file = form.file;
      if (!file) throw badField('file', 'required: the CSV or XLSX table to onboard');
      if (file.tooLarge) {
        throw new HttpError(413, `file is larger than the limit of ${maxBytes} bytes (BULK_UPLOAD_MAX_BYTES)`, { fields: { file: ['too large'] } });
      }
      // Recognised by content, not name. An empty file counts as CSV: the job reports it.
      const format = detectTableFormat(file.head);
      if (!format) throw new HttpError(415, `file: ${unsupportedFileMessage(file.head)}`, { fields: { file: ['unsupported file type'] } });
      // With the task that computes the match suggestions, once (lib/aggregator/bulk/suggest.ts).
      const job = await withTransaction(ctx.pool, async (client) => {
        const created = await createBulkUpload(client, {
          uploadId, aggregatorId: caller.aggregatorId, orgId: caller.orgId, domain, createdBy: caller.subject,
          fileName: file.name, format, sizeBytes: file.size, fileObjectKey: key, columnMap, mapping: saved, mode, sync,
        });
        await enqueueSuggestions(client, uploadId);
        return created;
      });
      return job;
    } catch (err) {
      await cleanup();
      throw err;
    }
  };
}

/** The bulk-upload routes (see the module comment), mounted under `/v1` after `bearerAuth`. */
export function bulkUploadRoutes(ctx: PlatformContext): Router {
  const router = Router();

  const receive = receiveBulkUpload(ctx);
  router.post('/bulk-uploads', requireRole('admin', 'operator'), async (req: Request, res: Response) => {
    const job = await receive(req, res);
    res.status(201).location(`/v1/bulk-uploads/${job.upload_id}`).json(job);
  });

  router.get('/bulk-uploads', async (req, res) => {
    const page = parse(listQuery, req.query, 'query');
    const { jobs, total } = await listBulkUploads(ctx.pool, callerOf(res).aggregatorId, page);
    res.json({ bulk_uploads: jobs, page: page.page, limit: page.limit, total, has_more: page.page * page.limit < total });
  });

  router.get('/bulk-uploads/:id', async (req, res, next) => {
    const id = uuidParam(req, next);
    if (!id) return;
    const job = await getBulkUpload(ctx.pool, callerOf(res).aggregatorId, id);
    if (!job) throw new HttpError(404, `No bulk upload ${id}`);
    res.json(job);
  });

  router.post('/bulk-uploads/:id/start', requireRole('admin', 'operator'), async (req, res, next) => {
    const id = uuidParam(req, next);
    if (!id) return;
    parse(startBody, req.body ?? {});
    const { confirm_pause: confirmPause, allow_large_pause: allowLargePause } = parse(startBody, req.body ?? {});
    const caller = callerOf(res);
    const started = await startBulkUpload(ctx.pool, caller.aggregatorId, id, caller.subject,
      { confirmPause, allowLargePause, maxPauseFraction: ctx.config.BULK_SYNC_MAX_PAUSE_FRACTION });
    switch (started.outcome) {
      case 'not_found': throw new HttpError(404, `No bulk upload ${id}`);
      case 'failed':
        throw new HttpError(409, `Bulk upload ${id} failed (${started.job.status_reason}); upload the corrected file as a new bulk upload`, { code: 'bulk_upload_failed' });
      case 'confirm_pause_required':
        throw new HttpError(400, 'confirm_pause: required for a sync upload, which pauses the participants the file no longer holds: '
          + `run a dry run (POST /v1/bulk-uploads/${id}/preview) and give the count to pause it reports`, { fields: { confirm_pause: ['required for a sync upload'] } });
      case 'dry_run_required':
        throw new HttpError(409, `Bulk upload ${id} is a sync upload and has no finished dry run: run POST /v1/bulk-uploads/${id}/preview first, `
          + 'then start it with the count to pause that the dry run reports as confirm_pause', { code: 'dry_run_required' });
      case 'pause_mismatch':
        throw new HttpError(409, `confirm_pause is ${confirmPause}, but the dry run of bulk upload ${id} found ${started.pauseCount} participants to pause: `
          + 'check the dry run and confirm its count', { code: 'pause_count_mismatch', fields: { confirm_pause: [`the dry run found ${started.pauseCount}`] } });
      case 'large_pause':
        throw new HttpError(409, `The file would pause ${started.pauseCount} of the ${started.participants} live and draft participants of this domain, more than `
          + `${Math.round(ctx.config.BULK_SYNC_MAX_PAUSE_FRACTION * 100)}% (BULK_SYNC_MAX_PAUSE_FRACTION): is the file complete? If it is, start it with allow_large_pause: true`,
        { code: 'large_pause_not_allowed', fields: { allow_large_pause: ['required for this pause'] } });
      default: res.json(started.job);
    }
  });

  const matchLimiter = new RateLimiterPostgres({
    storeClient: ctx.pool, schemaName: 'aggregator', tableName: 'bulk_match_rate_limits', tableCreated: true,
    // No interval timer: one row per aggregator, reset in place by its next call.
    clearExpiredByTimeout: false, keyPrefix: 'bulk-match', points: MATCH_RATE.points, duration: MATCH_RATE.durationSeconds,
  });
  // The suggestions the worker stored when the file came in: this route never reads the file.
  router.post('/bulk-uploads/:id/match', requireRole('admin', 'operator'), async (req, res, next) => {
    const id = uuidParam(req, next);
    if (!id) return;
    const caller = callerOf(res);
    try {
      await matchLimiter.consume(caller.aggregatorId);
    } catch (err) {
      if (!(err instanceof RateLimiterRes)) throw err;
      const retry = Math.max(1, Math.ceil(err.msBeforeNext / 1000));
      throw new HttpError(429, `At most ${MATCH_RATE.points} match requests per minute; try again in ${retry} s`, { code: 'rate_limited', headers: { 'Retry-After': String(retry) } });
    }
    const job = await getBulkUpload(ctx.pool, caller.aggregatorId, id);
    if (!job) throw new HttpError(404, `No bulk upload ${id}`);
    // Computed within moments of the upload; a bounded wait, as the dry run's.
    let stored = await loadSuggestions(ctx.pool, id);
    const deadline = Date.now() + ctx.config.BULK_PREVIEW_WAIT_MS;
    while (!stored && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, PREVIEW_POLL_MS));
      stored = await loadSuggestions(ctx.pool, id);
    }
    if (!stored) {
      throw new HttpError(409, `The match suggestions of bulk upload ${id} are not computed yet (the worker computes them once the file is received); try again shortly`,
        { code: 'suggestions_not_ready', headers: { 'Retry-After': '2' } });
    }
    if ('file_problem' in stored) throw new HttpError(422, `The file cannot be read: ${stored.file_problem}`, { code: 'unreadable_file' });
    res.json({ upload_id: id, participant_type: job.participant_type, ...stored });
  });

  router.post('/bulk-uploads/:id/preview', requireRole('admin', 'operator'), async (req, res, next) => {
    const id = uuidParam(req, next);
    if (!id) return;
    const { rows } = parse(previewBody, req.body ?? {});
    const caller = callerOf(res);
    const job = await getBulkUpload(ctx.pool, caller.aggregatorId, id);
    if (!job) throw new HttpError(404, `No bulk upload ${id}`);
    if (job.status !== 'pending') {
      throw new HttpError(409, `Bulk upload ${id} is ${job.status}; a dry run is for a pending job (before start)`, { code: 'bulk_upload_not_pending' });
    }
    let preview: PreviewJson = await createPreview(ctx.pool, ctx.pii, id, rows, caller.subject);
    // A bounded wait: small previews answer at once, larger ones (or a busy worker) are polled.
    const deadline = Date.now() + ctx.config.BULK_PREVIEW_WAIT_MS;
    while (preview.status === 'pending' && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, PREVIEW_POLL_MS));
      preview = (await getPreview(ctx.pool, ctx.pii, id, preview.preview_id))!;
    }
    res.status(preview.status === 'pending' ? 202 : 200).location(`/v1/bulk-uploads/${id}/previews/${preview.preview_id}`).json(preview);
  });

  // Admin and operator only, as the dry run itself: the result holds names and reasons quoting cells (issue 15).
  router.get('/bulk-uploads/:id/previews/:previewId', requireRole('admin', 'operator'), async (req, res, next) => {
    const id = uuidParam(req, next);
    if (!id) return;
    const previewId = String(req.params.previewId);
    const job = UUID.test(previewId) ? await getBulkUpload(ctx.pool, callerOf(res).aggregatorId, id) : null;
    const preview = job ? await getPreview(ctx.pool, ctx.pii, id, previewId.toLowerCase()) : null;
    if (!preview) throw new HttpError(404, `No preview ${previewId} of bulk upload ${id}`);
    res.json(preview);
  });

  // Admin and operator only: the report holds the rows' raw cells, phones and e-mails included (issue 15).
  router.get('/bulk-uploads/:id/errors', requireRole('admin', 'operator'), async (req, res, next) => {
    const id = uuidParam(req, next);
    if (!id) return;
    const job = await getBulkUpload(ctx.pool, callerOf(res).aggregatorId, id);
    if (!job) throw new HttpError(404, `No bulk upload ${id}`);
    if (job.purged_at) {
      throw new HttpError(410, `The error report of bulk upload ${id} was deleted on ${job.purged_at}, with the file and its rows, `
        + `${ctx.config.BULK_RETENTION_DAYS} days after the job ended (data retention, BULK_RETENTION_DAYS); correct and upload the file again if needed`,
      { code: 'error_report_expired' });
    }
    if (!job.errors_csv_object_key) {
      throw new HttpError(404, job.status === 'completed'
        ? `Bulk upload ${id} has no error report: no row failed or was skipped`
        : `Bulk upload ${id} has no error report (status ${job.status}); it is written when the job completes`, { code: 'no_error_report' });
    }
    let body;
    try {
      body = await ctx.storage.get(job.errors_csv_object_key);
    } catch (err) {
      if (err instanceof ObjectNotFoundError) throw new HttpError(404, `The error report of bulk upload ${id} is no longer stored`, { code: 'no_error_report' });
      throw err;
    }
    res.status(200).type('text/csv; charset=utf-8').attachment(`bulk-upload-${id}-errors.csv`);
    await pipeline(body, res);
  });

  return router;
}

/** A bulk-upload job (spec "Bulk-upload job", plus our file, attestation and progress fields; extra keys may appear). */
export const bulkUploadJobSchema = z.looseObject({
  upload_id: z.uuid(),
  status: z.enum(BULK_UPLOAD_STATUSES),
  status_reason: z.string().nullable(),
  participant_type: z.string(),
  total_rows: z.int().nullable(),
  passed: z.int(),
  failed: z.int(),
  skipped: z.int(),
  errors_csv_object_key: z.string().nullable(),
  schema_id: z.string(),
  schema_version: z.string(),
  created_at: z.string().meta({ format: 'date-time' }),
  completed_at: z.string().meta({ format: 'date-time' }).nullable(),
  file_name: z.string().nullable(),
  file_format: z.enum(['csv', 'xlsx']),
  file_size_bytes: z.int(),
  column_map: z.record(z.string(), z.string().nullable()).nullable(),
  created_by: z.string(),
  attested_by: z.string().nullable(),
  attested_at: z.string().meta({ format: 'date-time' }).nullable(),
  started_at: z.string().meta({ format: 'date-time' }).nullable(),
  encoding: z.string().nullable(),
  sheet: z.string().nullable(),
  processed_rows: z.int().meta({ description: 'passed + failed + skipped' }),
  updated_at: z.string().meta({ format: 'date-time' }),
  mode: z.enum(UPLOAD_MODES),
  sync: z.boolean(),
  created: z.int().meta({ description: 'rows that created a participant (passed = created + updated + unchanged)' }),
  updated: z.int().meta({ description: 'rows that changed their participant' }),
  unchanged: z.int().meta({ description: 'rows whose participant already held their values (nothing written)' }),
  confirm_pause: z.int().nullable().meta({ description: 'sync: the pause count confirmed at start' }),
  allow_large_pause: z.boolean(),
  to_pause: z.int().nullable().meta({ description: 'sync: participants the file no longer holds, found when it was staged' }),
  paused: z.int().meta({ description: 'sync: participants paused so far' }),
}).meta({ id: 'BulkUploadJob' });

/** The multipart form of `POST /v1/bulk-uploads` (read with busboy; the fields are checked as they arrive). */
export const bulkUploadFormSchema = z.object({
  participant_type: z.string().min(1).meta({ description: 'a participant domain the caller may onboard, e.g. seeker or provider' }),
  file: z.string().meta({ format: 'binary', description: `the CSV or XLSX table (recognised by content), at most BULK_UPLOAD_MAX_BYTES` }),
  column_map: z.string().optional()
    .meta({ description: 'JSON object of at most 500 entries: file header → schema field name, or null to ignore the column' }),
  mapping_id: z.string().optional().meta({ description: 'instead of column_map: the id of a saved mapping' }),
  mapping_version: z.string().optional().meta({ description: 'with mapping_id: its version (default the newest)' }),
  mode: z.enum(UPLOAD_MODES).optional().meta({ description: 'create (default, or the saved mapping\'s mode): new participants only; '
    + 'upsert: create or update, matched on external_id where the domain has one, else phone, then e-mail; update: existing participants only' }),
  sync: z.enum(['true', 'false']).optional().meta({ description: 'with mode upsert: the file is the whole list, and participants it no longer holds '
    + 'are paused once the job completes (start needs confirm_pause from a dry run)' }),
});

const listResponseSchema = z.object({
  bulk_uploads: z.array(bulkUploadJobSchema), page: z.int(), limit: z.int(), total: z.int(), has_more: z.boolean(),
});
const TAGS = ['bulk uploads'];

/** Path parameters of one preview of a job. */
export const previewIdParams = uploadIdParams.extend({ previewId: z.string().meta({ format: 'uuid', description: 'preview id (anything else is 404)' }) });
const suggestionsSchema = z.object({
  upload_id: z.uuid(), participant_type: z.string(), headers: z.array(z.string()),
  fields: z.array(z.looseObject({ field: z.string() })).meta({ description: 'per schema field: its match and candidate columns with scores' }),
  unmatched_columns: z.array(z.string()), required_unmatched: z.array(z.string()),
  suggested_mapping: z.record(z.string(), z.unknown()).meta({ description: 'the mapping the matches make, to review and save' }), sampled_rows: z.int(),
});
/** A dry run (lib/aggregator/bulk/preview.ts `PreviewJson`): the result fields once completed. */
const previewSchema = z.object({
  preview_id: z.uuid(), upload_id: z.uuid(), status: z.enum(['pending', 'completed', 'failed']), rows_requested: z.int(),
  created_at: z.string(), completed_at: z.string().nullable(),
  rows_read: z.int().optional(),
  counts: z.object({
    passed: z.int(), failed: z.int(), skipped: z.int(),
    created: z.int().optional(), updated: z.int().optional(), unchanged: z.int().optional(),
  }).optional().meta({ description: 'an upsert or update job\'s dry run counts the whole file, with created, updated and unchanged (their sum is passed)' }),
  whole_file: z.boolean().optional(),
  pause: z.object({ count: z.int(), participants: z.array(z.looseObject({ participant_id: z.uuid() })) }).optional()
    .meta({ description: 'sync jobs: participants the file leaves out (the count start\'s confirm_pause repeats), the first 50 listed' }),
  rows: z.array(z.looseObject({})).optional(), headers: z.array(z.string()).optional(), ignored_columns: z.array(z.string()).optional(),
  encoding: z.string().nullable().optional(), sheet: z.string().nullable().optional(), file_problem: z.string().nullable().optional(),
}).meta({ id: 'BulkUploadPreview' });
const previewLocation = z.object({ location: z.string().meta({ description: '/v1/bulk-uploads/{id}/previews/{previewId}' }) });

/** Docs of `bulkUploadRoutes` (api/http/openapi.ts). */
export const bulkUploadRouteDocs: RouteDoc[] = [
  {
    method: 'POST', path: '/v1/bulk-uploads', summary: 'Upload a CSV or XLSX file as a new bulk upload (pending)', tags: TAGS, security: 'bearer',
    body: { schema: bulkUploadFormSchema, contentType: 'multipart/form-data' },
    responses: {
      201: { description: 'The job, pending until started', schema: bulkUploadJobSchema, headers: z.object({ location: z.string().meta({ description: '/v1/bulk-uploads/{id}' }) }) },
    },
    errors: {
      403: 'Role viewer, or the caller may not onboard this participant type', 413: 'The file exceeds BULK_UPLOAD_MAX_BYTES',
      415: 'Not multipart/form-data, or the file is neither CSV nor XLSX',
    },
  },
  {
    method: 'GET', path: '/v1/bulk-uploads', summary: 'The caller\'s bulk uploads, newest first', tags: TAGS, security: 'bearer',
    query: listQuery, responses: { 200: { description: 'A page of jobs', schema: listResponseSchema } },
  },
  {
    method: 'GET', path: '/v1/bulk-uploads/:id', summary: 'One bulk upload with its counters', tags: TAGS, security: 'bearer',
    params: uploadIdParams, responses: { 200: { description: 'The job', schema: bulkUploadJobSchema } }, errors: { 404: 'No such job of the caller' },
  },
  {
    method: 'POST', path: '/v1/bulk-uploads/:id/start', summary: 'Start a pending bulk upload (idempotent on running and completed)', tags: TAGS,
    security: 'bearer', params: uploadIdParams, body: { schema: startBody, example: API_EXAMPLES.bulk_upload_start },
    responses: { 200: { description: 'The job, running (or as it was when already running or completed)', schema: bulkUploadJobSchema } },
    errors: { 403: 'Role viewer', 404: 'No such job of the caller', 409: 'The job failed (bulk_upload_failed): upload the corrected file anew' },
  },
  {
    method: 'GET', path: '/v1/bulk-uploads/:id/errors', summary: 'Error report: failed and skipped rows with their columns and reasons', tags: TAGS,
    security: 'bearer', params: uploadIdParams,
    responses: { 200: { description: 'CSV attachment', content: [{ type: 'text/csv', schema: z.string() }] } },
    errors: { 404: 'No such job, or no error report (no_error_report)' },
  },
  {
    method: 'POST', path: '/v1/bulk-uploads/:id/match', summary: 'Suggest how the file\'s columns map to the schema\'s fields', tags: TAGS, security: 'bearer',
    description: 'Computed once by the worker when the file is received, and stored: this reads them (waiting up to BULK_PREVIEW_WAIT_MS for them). '
      + `Admin and operator; at most ${MATCH_RATE.points} calls per aggregator per minute.`,
    params: uploadIdParams, responses: { 200: { description: 'Suggestions from the headers and the first rows', schema: suggestionsSchema } },
    errors: {
      403: 'Role viewer', 404: 'No such job of the caller', 409: 'Not computed yet (suggestions_not_ready, with Retry-After)', 422: 'The file cannot be read',
      429: 'Too many calls (Retry-After)',
    },
  },
  {
    method: 'POST', path: '/v1/bulk-uploads/:id/preview', summary: 'Dry run of a pending job over its first rows (nothing is written)', tags: TAGS, security: 'bearer',
    params: uploadIdParams, body: { schema: previewBody, required: false },
    responses: {
      200: { description: 'The finished dry run', schema: previewSchema, headers: previewLocation },
      202: { description: 'Still running: poll the Location', schema: previewSchema, headers: previewLocation },
    },
    errors: { 403: 'Role viewer', 404: 'No such job of the caller', 409: 'The job is no longer pending' },
  },
  {
    method: 'GET', path: '/v1/bulk-uploads/:id/previews/:previewId', summary: 'One dry run of a job', tags: TAGS, security: 'bearer',
    params: previewIdParams, responses: { 200: { description: 'The dry run', schema: previewSchema } }, errors: { 404: 'No such job or preview' },
  },
];
