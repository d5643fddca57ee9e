/**
 * Task `voice-export-retention` (crontab, hourly; Trust II, docs/decisions.md): deletes the CSV of
 * an export job — decrypted names, phones and e-mails, handed to an external dialler — once
 * VOICE_EXPORT_RETENTION_DAYS have passed since it was written, then sets the job's
 * `export_purged_at`. The job itself stays (counts, status); GET /v1/campaign/exports/{id} then
 * answers 410.
 *
 * Objects first, each job's mark after (deleting an object that is already gone is not an error),
 * a batch at a time, so an interrupted run is resumed by the next.
 */
import type { Task } from 'graphile-worker';
import type { PlatformContext } from '../lib/context.ts';

export const VOICE_EXPORT_RETENTION_TASK = 'voice-export-retention';

/** Jobs purged per query; the task loops until none is due. */
const BATCH = 100;

/** The `voice-export-retention` task (see the module comment). Idempotent. */
export function voiceExportRetention(ctx: PlatformContext): Task {
  return async () => {
    const days = ctx.config.VOICE_EXPORT_RETENTION_DAYS;
    let purged = 0;
    for (;;) {
      const { rows } = await ctx.pool.query<{ job_id: string; export_object_key: string }>(
        `SELECT job_id, export_object_key FROM aggregator.voice_jobs
          WHERE export_written_at < now() - make_interval(days => $1) AND export_purged_at IS NULL
          ORDER BY export_written_at LIMIT $2`, [days, BATCH]);
      for (const job of rows) {
        await ctx.storage.delete(job.export_object_key);
        await ctx.pool.query(
          `UPDATE aggregator.voice_jobs SET export_purged_at = now(), version = version + 1, updated_at = now()
            WHERE job_id = $1 AND export_purged_at IS NULL`, [job.job_id]);
      }
      purged += rows.length;
      if (rows.length < BATCH) break;
    }
    if (purged) ctx.logger.info({ purged, retention_days: days }, 'voice exports past retention deleted');
  };
}
