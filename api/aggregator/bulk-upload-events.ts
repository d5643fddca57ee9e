/**
 * `GET /v1/bulk-uploads/{id}/events`: a bulk upload's progress as Server-Sent Events (WHATWG HTML
 * §9.2 "Server-sent events"; decided in docs/decisions.md, "Operator console"). Each `progress`
 * event carries the job's counters as they commit; a last `done` event carries the final state
 * (completed or failed) and the stream ends (api/http/event-stream.ts: the server reads the job row
 * every PROGRESS_INTERVAL_MS and sends an event only when something changed). Streams are capped per
 * aggregator and per process, last at most EVENT_STREAM_MAX_SECONDS (a `reconnect` event), and end
 * with a `denied` event once the caller's token expires or its aggregator is no longer approved.
 * The operator console's job page streams the same events (api/console).
 */
import { Router, type Response } from 'express';
import { z } from 'zod';
import { getBulkUpload, type BulkUploadJson } from '../../lib/aggregator/bulk/upload-jobs.ts';
import type { PlatformContext } from '../../lib/context.ts';
import { callerOf } from '../http/auth.ts';
import { HttpError } from '../http/errors.ts';
import { streamCaller, streamChanges, type StreamCaller } from '../http/event-stream.ts';
import type { RouteDoc } from '../http/openapi.ts';
import { uploadIdParams } from './bulk-uploads.ts';

/** How often an open stream checks its caller and reads the job row (ms). */
export const PROGRESS_INTERVAL_MS = 500;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The fields of a job a progress event carries. */
export function progressOf(job: BulkUploadJson) {
  return {
    upload_id: job.upload_id, status: job.status, status_reason: job.status_reason, total_rows: job.total_rows,
    processed_rows: job.processed_rows, passed: job.passed, failed: job.failed, skipped: job.skipped,
    completed_at: job.completed_at, has_error_report: job.errors_csv_object_key !== null,
  };
}

/**
 * Streams the progress of upload `uploadId` of `caller`'s aggregator on `res` (see the module
 * comment) until the job ends, the client goes away, the stream's lifetime ends or `caller` is refused.
 * @throws HttpError 404 for an unknown job, 429 beyond the caps (before any byte is sent)
 */
export async function streamUploadProgress(ctx: PlatformContext, caller: StreamCaller, uploadId: string, res: Response): Promise<void> {
  const aggregatorId = caller.id;
  const job = UUID.test(uploadId) ? await getBulkUpload(ctx.pool, aggregatorId, uploadId.toLowerCase()) : null;
  if (!job) throw new HttpError(404, `No bulk upload ${uploadId}`);
  const snapshot = (j: BulkUploadJson) => ({ data: progressOf(j), final: j.status === 'completed' || j.status === 'failed' });
  await streamChanges(res, snapshot(job), async () => {
    const next = await getBulkUpload(ctx.pool, aggregatorId, job.upload_id);
    return next && snapshot(next);
  }, { intervalMs: PROGRESS_INTERVAL_MS, caller, limits: ctx.config });
}

/** The API route (mount under `/v1` after bearerAuth). */
export function bulkUploadEventRoutes(ctx: PlatformContext): Router {
  const router = Router();
  router.get('/bulk-uploads/:id/events', async (req, res) => {
    // The token bearerAuth verified, verified again before each read (expiry), with the aggregator's approval.
    const token = /^Bearer\s+(\S+)\s*$/i.exec(req.header('authorization') ?? '')![1];
    const caller = streamCaller(ctx, callerOf(res).aggregatorId, () => ctx.tokens.verify(token));
    await streamUploadProgress(ctx, caller, String(req.params.id), res);
  });
  return router;
}

/** Docs of `bulkUploadEventRoutes` (api/http/openapi.ts). */
export const bulkUploadEventRouteDocs: RouteDoc[] = [{
  method: 'GET', path: '/v1/bulk-uploads/:id/events', summary: 'A bulk upload\'s progress as Server-Sent Events', tags: ['bulk uploads'], security: 'bearer',
  description: 'A `progress` event with the counters each time they change (as chunks commit), then one `done` event with the final state, then the stream ends. Event data: upload_id, status, status_reason, total_rows, processed_rows, passed, failed, skipped, completed_at, has_error_report. '
    + 'A stream lasts at most EVENT_STREAM_MAX_SECONDS, then ends with a `reconnect` event (an EventSource reconnects by itself); it ends with a `denied` event {reason} when the token expires or the aggregator is no longer approved.',
  params: uploadIdParams,
  responses: { 200: { description: 'An event stream (text/event-stream)', content: [{ type: 'text/event-stream', schema: z.string() }] } },
  errors: { 404: 'No such bulk upload of the caller', 429: 'Too many open event streams of the aggregator (EVENT_STREAMS_PER_CALLER) or of the server (EVENT_STREAMS_MAX); Retry-After' },
}];
