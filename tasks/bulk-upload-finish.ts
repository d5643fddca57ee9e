/**
 * Task `bulk-upload-finish` {upload_id}: enqueued by the last chunk (or by staging, for a file
 * without data rows). Streams the error report of the failed and skipped rows to object storage
 * (when there are any) and completes the job: status `completed`, `completed_at`,
 * `errors_csv_object_key`. Writing the report again on a retry replaces the same object.
 */
import type { Task } from 'graphile-worker';
import { errorReportStream } from '../lib/aggregator/bulk/error-report.ts';
import { errorReportObjectKey, loadBulkUpload, type UploadPayload } from '../lib/aggregator/bulk/upload-jobs.ts';
import type { PlatformContext } from '../lib/context.ts';
import { enqueueDashboardRefresh } from '../lib/aggregator/dashboard.ts';

/** The `bulk-upload-finish` task (see the module comment); idempotent: only a running job is completed. */
export function bulkUploadFinish(ctx: PlatformContext): Task {
  return async (payload) => {
    const { upload_id: uploadId } = payload as UploadPayload;
    const job = await loadBulkUpload(ctx.pool, uploadId);
    if (!job || job.status !== 'running') return;
    if (job.chunks_done !== job.chunk_count) {
      throw new Error(`bulk upload ${uploadId}: ${job.chunks_done} of ${job.chunk_count} chunks done; finishing must wait`);
    }
    let key: string | null = null;
    if (job.failed + job.skipped > 0) {
      key = errorReportObjectKey(job.aggregator_id, uploadId);
      await ctx.storage.put(key, errorReportStream(ctx.pool, ctx.pii, uploadId, job.headers ?? []), { contentType: 'text/csv; charset=utf-8' });
    }
    await ctx.pool.query(
      `UPDATE aggregator.bulk_uploads
          SET status = 'completed', errors_csv_object_key = $2, completed_at = now(), updated_at = now()
        WHERE upload_id = $1 AND status = 'running'`, [uploadId, key]);
    await enqueueDashboardRefresh(ctx.pool, job.aggregator_id);
  };
}
