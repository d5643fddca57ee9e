/**
 * Bulk-upload endpoints of the aggregator service (spec "Bulk-upload job", `POST …/{id}/start`;
 * the rest decided in docs/decisions.md, "Bulk onboarding"). The API only stores the file,
 * records the job and enqueues; tasks/bulk-upload-*.ts do the onboarding.
 *
 * - `POST /v1/bulk-uploads`             multipart: participant_type, file (CSV or XLSX), column_map? → 201 job (pending)
 * - `GET  /v1/bulk-uploads?page=&limit=` the caller's jobs, newest first
 * - `GET  /v1/bulk-uploads/{id}`        one job, with its counters
 * - `POST /v1/bulk-uploads/{id}/start`  {attestation: true} → running (idempotent on running/completed; 409 when failed)
 * - `GET  /v1/bulk-uploads/{id}/errors` the error-report CSV (404 when there is none)
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import busboy from 'busboy';
import { Router, type NextFunction, type Request, type Response } from 'express';
import { z } from 'zod';
import { detectTableFormat, FORMAT_SNIFF_BYTES, unsupportedFileMessage } from '../../lib/aggregator/bulk/file-type.ts';
import {
  createBulkUpload, getBulkUpload, listBulkUploads, sourceObjectKey, startBulkUpload,
} from '../../lib/aggregator/bulk/upload-jobs.ts';
import type { PlatformContext } from '../../lib/context.ts';
import { ObjectNotFoundError, type ObjectStorage } from '../../lib/platform/storage.ts';
import { assertDomainAllowed, callerOf, requireRole } from '../http/auth.ts';
import { HttpError } from '../http/errors.ts';
import { parse } from '../http/validation.ts';

const MAX_COLUMN_MAP_BYTES = 64 * 1024;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

const listQuery = z.object({
  page: z.coerce.number().int().min(1).default(1),
  limit: z.coerce.number().int().min(1).max(200).default(50),
});
const startBody = z.looseObject({
  attestation: z.literal(true, { error: 'attestation must be true: the operator attests their authority to upload these participants' }),
});
const columnMapSchema = z.record(z.string().min(1).max(200), z.string().min(1).nullable())
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

/** Calls `next()` (another route, or the 404 handler) unless the path id can name a job. */
function uuidParam(req: Request, next: NextFunction): string | undefined {
  const id = String(req.params.id);
  if (!UUID.test(id)) {
    next();
    return undefined;
  }
  return id.toLowerCase();
}

/** The bulk-upload routes (see the module comment), mounted under `/v1` after `bearerAuth`. */
export function bulkUploadRoutes(ctx: PlatformContext): Router {
  const router = Router();
  const maxBytes = ctx.config.BULK_UPLOAD_MAX_BYTES;

  router.post('/bulk-uploads', requireRole('admin', 'operator'), async (req: Request, res: Response) => {
    if (!req.is('multipart/form-data')) {
      throw new HttpError(415, 'Content-Type must be multipart/form-data with the fields participant_type, file and optionally column_map');
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
      let columnMap: Record<string, string | null> | null = null;
      const rawMap = form.fields.get('column_map');
      if (rawMap !== undefined && rawMap.trim() !== '') {
        const shape = 'must be a JSON object of at most 500 entries: file header → schema field name, or null to ignore the column';
        let json: unknown;
        try {
          json = JSON.parse(rawMap);
        } catch {
          throw badField('column_map', shape);
        }
        const parsed = columnMapSchema.safeParse(json);
        if (!parsed.success) throw badField('column_map', shape);
        columnMap = parsed.data;
        const fields = new Set(domain.fields.map((f) => f.name));
        const unknown = Object.entries(columnMap).filter(([, f]) => f !== null && !fields.has(f));
        if (unknown.length) {
          throw badField('column_map', `unknown ${domain.name} fields ${unknown.map(([h, f]) => `${JSON.stringify(f)} (for ${JSON.stringify(h)})`).join(', ')}; fields are ${[...fields].join(', ')}`);
        }
      }
      const file = form.file;
      if (!file) throw badField('file', 'required: the CSV or XLSX table to onboard');
      if (file.tooLarge) {
        throw new HttpError(413, `file is larger than the limit of ${maxBytes} bytes (BULK_UPLOAD_MAX_BYTES)`, { fields: { file: ['too large'] } });
      }
      // Recognised by content, not name. An empty file counts as CSV: the job reports it.
      const format = detectTableFormat(file.head);
      if (!format) throw new HttpError(415, `file: ${unsupportedFileMessage(file.head)}`, { fields: { file: ['unsupported file type'] } });
      const job = await createBulkUpload(ctx.pool, {
        uploadId, aggregatorId: caller.aggregatorId, orgId: caller.orgId, domain, createdBy: caller.subject,
        fileName: file.name, format, sizeBytes: file.size, fileObjectKey: key, columnMap,
      });
      res.status(201).location(`/v1/bulk-uploads/${uploadId}`).json(job);
    } catch (err) {
      await cleanup();
      throw err;
    }
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
    const caller = callerOf(res);
    const started = await startBulkUpload(ctx.pool, caller.aggregatorId, id, caller.subject);
    if (started.outcome === 'not_found') throw new HttpError(404, `No bulk upload ${id}`);
    if (started.outcome === 'failed') {
      throw new HttpError(409, `Bulk upload ${id} failed (${started.job.status_reason}); upload the corrected file as a new bulk upload`, { code: 'bulk_upload_failed' });
    }
    res.json(started.job);
  });

  router.get('/bulk-uploads/:id/errors', async (req, res, next) => {
    const id = uuidParam(req, next);
    if (!id) return;
    const job = await getBulkUpload(ctx.pool, callerOf(res).aggregatorId, id);
    if (!job) throw new HttpError(404, `No bulk upload ${id}`);
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
