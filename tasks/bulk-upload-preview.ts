/**
 * Task `bulk-upload-preview` {preview_id}: the dry run of a pending bulk upload over its first N
 * data rows (lib/aggregator/bulk/preview.ts) — the real coercion, validation and duplicate checks,
 * no participant written, nothing pushed, the job left `pending`. The result is stored with the
 * preview, where `GET /v1/bulk-uploads/{id}/previews/{preview_id}` (and the waiting POST) read it.
 * Idempotent: a completed preview is left alone.
 */
import type { Task } from 'graphile-worker';
import { completePreview, previewUpload, type PreviewPayload } from '../lib/aggregator/bulk/preview.ts';
import { loadBulkUpload } from '../lib/aggregator/bulk/upload-jobs.ts';
import type { PlatformContext } from '../lib/context.ts';
import { tableLimits } from '../lib/aggregator/bulk/table.ts';

/** The `bulk-upload-preview` task (see the module comment). */
export function bulkUploadPreview(ctx: PlatformContext): Task {
  return async (payload) => {
    const { preview_id: previewId } = payload as PreviewPayload;
    const { rows: [preview] } = await ctx.pool.query<{ upload_id: string; rows: number; status: string }>(
      'SELECT upload_id, rows, status FROM aggregator.bulk_upload_previews WHERE preview_id = $1', [previewId]);
    if (!preview || preview.status !== 'pending') return;
    const job = await loadBulkUpload(ctx.pool, preview.upload_id);
    const domain = job && ctx.network.domains.get(job.participant_type);
    if (!job || !domain) return;
    const result = await previewUpload({ db: ctx.pool, pii: ctx.pii, network: ctx.network, limits: tableLimits(ctx.config) }, job, domain, preview.rows,
      () => ctx.storage.get(job.file_object_key));
    await completePreview(ctx.pool, ctx.pii, previewId, result);
  };
}
