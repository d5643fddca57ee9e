/**
 * Task `bulk-upload-finish` {upload_id}: enqueued by the last chunk (or by staging, for a file
 * without data rows). Streams the error report of the failed and skipped rows to object storage
 * (when there are any) and completes the job: status `completed`, `completed_at`,
 * `errors_csv_object_key`. Writing the report again on a retry replaces the same object.
 *
 * A sync upload (issue 30) first pauses the participants its file no longer holds (listed in
 * `bulk_upload_pauses` when it was staged), in signals too, 1000 a transaction: each batch marks
 * its entries done with the pause, so a retried finish pauses each participant once. Nothing is
 * deleted; a later upload that holds them makes them live again (tasks/bulk-upload-chunk.ts).
 *
 * Once completed, it refreshes the participants' planner statistics if the table changed by more
 * than a tenth since they were taken (lib/aggregator/bulk/upsert.ts `refreshParticipantStatistics`),
 * so that the next upload's key lookups, and the dashboard's reads, plan on the table as it now is.
 */
import type { Task } from 'graphile-worker';
import { errorReportStream } from '../lib/aggregator/bulk/error-report.ts';
import { errorReportObjectKey, loadBulkUpload, type UploadPayload } from '../lib/aggregator/bulk/upload-jobs.ts';
import type { PlatformContext } from '../lib/context.ts';
import { enqueueDashboardRefresh } from '../lib/aggregator/dashboard.ts';
import { recordChanges } from '../lib/aggregator/participants.ts';
import { refreshParticipantStatistics } from '../lib/aggregator/bulk/upsert.ts';
import { createSignalsClient, MAX_ITEMS_PER_REQUEST } from '../lib/clients/signals-client.ts';
import { withTransaction } from '../lib/platform/db.ts';

/** The `bulk-upload-finish` task (see the module comment); idempotent: only a running job is completed. */
export function bulkUploadFinish(ctx: PlatformContext): Task {
  return async (payload, helpers) => {
    const { upload_id: uploadId } = payload as UploadPayload;
    const job = await loadBulkUpload(ctx.pool, uploadId);
    if (!job || job.status !== 'running') return;
    if (job.chunks_done !== job.chunk_count) {
      throw new Error(`bulk upload ${uploadId}: ${job.chunks_done} of ${job.chunk_count} chunks done; finishing must wait`);
    }
    if (job.sync) await pauseLeftOut(ctx, job.aggregator_id, uploadId);
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
    // Once the job is completed, so that its time is not the upload's. A failure only leaves the
    // next upsert's staging to analyze (lib/aggregator/bulk/upsert.ts). The job's own counts, as the
    // last chunks' writes may not have reached the statistics yet (a small upload's all of them).
    await refreshParticipantStatistics(ctx.pool, { wait: false, changed: job.created + job.updated })
      .catch((err: unknown) => helpers.logger.error(`bulk upload ${uploadId}: participants not analyzed: ${String(err)}`));
  };
}

/**
 * Pauses, batch by batch, the participants sync upload `uploadId` left out and has not paused yet
 * (see the module comment). A participant no longer live or draft (paused or retired meanwhile)
 * is only marked done.
 * @throws SignalsUnavailableError (the batch rolls back; the task is retried)
 */
async function pauseLeftOut(ctx: PlatformContext, aggregatorId: string, uploadId: string): Promise<void> {
  const signals = createSignalsClient({ baseUrl: ctx.urls.signals, apiKey: ctx.internalApiKey, maxBodyBytes: ctx.config.HTTP_BODY_LIMIT });
  for (;;) {
    const more = await withTransaction(ctx.pool, async (client) => {
      const { rows } = await client.query<{ participant_id: string; pausable: boolean }>(
        `SELECT q.participant_id, p.lifecycle_status IN ('live', 'draft') AS pausable
           FROM aggregator.bulk_upload_pauses q JOIN aggregator.participants p USING (participant_id)
          WHERE q.upload_id = $1 AND q.done_at IS NULL
          ORDER BY q.participant_id LIMIT $2 FOR UPDATE OF q, p`, [uploadId, MAX_ITEMS_PER_REQUEST]);
      if (!rows.length) return false;
      const pausable = rows.filter((r) => r.pausable).map((r) => r.participant_id);
      const answers = pausable.length ? await signals.setLifecycle(pausable.map((id) => ({ item_id: id, lifecycle_status: 'paused' as const }))) : [];
      const paused = pausable.filter((_, i) => answers[i].lifecycle_status === 'paused');
      await client.query(
        `UPDATE aggregator.participants SET lifecycle_status = 'paused', paused_by_upload_id = $2, pushed_at = now(), updated_at = now()
          WHERE participant_id = ANY($1::uuid[])`, [paused, uploadId]);
      await recordChanges(client, aggregatorId, paused.map((participantId) => ({ participantId, uploadId, rowNumber: null, kind: 'paused' as const, fields: ['lifecycle_status'] })));
      await client.query('UPDATE aggregator.bulk_upload_pauses SET done_at = now() WHERE upload_id = $1 AND participant_id = ANY($2::uuid[])',
        [uploadId, rows.map((r) => r.participant_id)]);
      await client.query('UPDATE aggregator.bulk_uploads SET paused = paused + $2, updated_at = now() WHERE upload_id = $1', [uploadId, paused.length]);
      return rows.length === MAX_ITEMS_PER_REQUEST;
    });
    if (!more) return;
  }
}
