/**
 * Task `bulk-upload-retention` (crontab, hourly; issue 15, docs/decisions.md "Hardening"): deletes
 * what a bulk upload kept of its file once BULK_RETENTION_DAYS have passed since the job completed
 * or failed — or, for a job never started, since it was created: the stored file, the error
 * report, the failed and skipped rows, staged chunks and dry runs. The job itself stays (counts,
 * status) with `purged_at` set; GET /v1/bulk-uploads/{id}/errors then answers 410. A job never
 * started is also marked failed, with the reason, since its file is gone.
 *
 * Jobs are purged a few at a time, each in its own transaction after its objects were deleted
 * (deleting an object that is already gone is not an error), so an interrupted run is resumed by
 * the next one.
 */
import type { Task } from 'graphile-worker';
import type { PlatformContext } from '../lib/context.ts';
import { withTransaction } from '../lib/platform/db.ts';
import { errorReportObjectKey } from '../lib/aggregator/bulk/upload-jobs.ts';

export const RETENTION_TASK = 'bulk-upload-retention';

/** Jobs purged per query; the task loops until none is due. */
const BATCH = 100;

/** The `bulk-upload-retention` task (see the module comment). Idempotent. */
export function bulkUploadRetention(ctx: PlatformContext): Task {
  return async () => {
    const days = ctx.config.BULK_RETENTION_DAYS;
    let purged = 0;
    for (;;) {
      const { rows } = await ctx.pool.query<{ upload_id: string; aggregator_id: string; file_object_key: string; errors_csv_object_key: string | null; status: string }>(
        `SELECT upload_id, aggregator_id, file_object_key, errors_csv_object_key, status FROM aggregator.bulk_uploads
          WHERE purged_at IS NULL AND status <> 'running'
            AND COALESCE(completed_at, created_at) < now() - make_interval(days => $1)
          ORDER BY COALESCE(completed_at, created_at) LIMIT $2`, [days, BATCH]);
      for (const job of rows) {
        await ctx.storage.delete(job.file_object_key);
        // The report where finish writes it, even if unrecorded (a crash between the write and the record).
        const reportKeys = new Set([errorReportObjectKey(job.aggregator_id, job.upload_id), job.errors_csv_object_key ?? '']);
        for (const key of reportKeys) if (key) await ctx.storage.delete(key);
        await withTransaction(ctx.pool, async (client) => {
          await client.query('DELETE FROM aggregator.bulk_upload_rows WHERE upload_id = $1', [job.upload_id]);
          await client.query('DELETE FROM aggregator.bulk_upload_chunks WHERE upload_id = $1', [job.upload_id]);
          await client.query('DELETE FROM aggregator.bulk_upload_previews WHERE upload_id = $1', [job.upload_id]);
          await client.query(
            `UPDATE aggregator.bulk_uploads
                SET purged_at = now(), updated_at = now(),
                    status = CASE WHEN status = 'pending' THEN 'failed' ELSE status END,
                    status_reason = CASE WHEN status = 'pending' THEN $2 ELSE status_reason END,
                    completed_at = CASE WHEN status = 'pending' THEN now() ELSE completed_at END
              WHERE upload_id = $1`,
            [job.upload_id, `not started within ${days} days of the upload (BULK_RETENTION_DAYS); the file was deleted, upload it again`]);
        });
      }
      purged += rows.length;
      if (rows.length < BATCH) break;
    }
    if (purged) ctx.logger.info({ purged, retention_days: days }, 'bulk uploads past retention purged');
  };
}
