/**
 * `GET /v1/bulk-uploads/{id}/events`: a bulk upload's progress as Server-Sent Events (WHATWG HTML
 * §9.2 "Server-sent events"; decided in docs/decisions.md, "Operator console"). Each `progress`
 * event carries the job's counters as they commit; a last `done` event carries the final state
 * (completed or failed) and the stream ends. The server reads the job row every
 * PROGRESS_INTERVAL_MS and sends an event only when something changed, so the page keeps no
 * polling loop of its own; a `: keep-alive` comment every 15 s keeps proxies from closing it.
 * The operator console's job page streams the same events (api/console).
 */
import { Router, type Request, type Response } from 'express';
import { getBulkUpload, type BulkUploadJson } from '../../lib/aggregator/bulk/upload-jobs.ts';
import type { PlatformContext } from '../../lib/context.ts';
import { callerOf } from '../http/auth.ts';
import { HttpError } from '../http/errors.ts';

/** How often an open stream reads the job row (ms). */
export const PROGRESS_INTERVAL_MS = 250;
const KEEP_ALIVE_MS = 15_000;
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
 * Streams the progress of upload `uploadId` of `aggregatorId` on `res` (see the module comment)
 * until the job ends or the client goes away. @throws HttpError 404 for an unknown job (before any byte is sent)
 */
export async function streamUploadProgress(ctx: PlatformContext, aggregatorId: string, uploadId: string, req: Request, res: Response): Promise<void> {
  let job = UUID.test(uploadId) ? await getBulkUpload(ctx.pool, aggregatorId, uploadId.toLowerCase()) : null;
  if (!job) throw new HttpError(404, `No bulk upload ${uploadId}`);
  res.status(200).set({
    'Content-Type': 'text/event-stream; charset=utf-8', 'Cache-Control': 'no-store', Connection: 'keep-alive', 'X-Accel-Buffering': 'no',
  });
  res.flushHeaders();
  let closed = false;
  req.on('close', () => { closed = true; });
  let sequence = 0;
  const send = (event: string, data: unknown) => res.write(`id: ${++sequence}\nevent: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
  let last = '';
  let lastWrite = Date.now();
  while (!closed) {
    const progress = progressOf(job);
    const text = JSON.stringify(progress);
    if (job.status === 'completed' || job.status === 'failed') {
      send('done', progress);
      break;
    }
    if (text !== last) {
      send('progress', progress);
      last = text;
      lastWrite = Date.now();
    } else if (Date.now() - lastWrite > KEEP_ALIVE_MS) {
      res.write(': keep-alive\n\n');
      lastWrite = Date.now();
    }
    await new Promise((resolve) => setTimeout(resolve, PROGRESS_INTERVAL_MS));
    if (closed) break;
    const next = await getBulkUpload(ctx.pool, aggregatorId, job.upload_id);
    if (!next) break;
    job = next;
  }
  res.end();
}

/** The API route (mount under `/v1` after bearerAuth). */
export function bulkUploadEventRoutes(ctx: PlatformContext): Router {
  const router = Router();
  router.get('/bulk-uploads/:id/events', async (req, res) => {
    await streamUploadProgress(ctx, callerOf(res).aggregatorId, String(req.params.id), req, res);
  });
  return router;
}
