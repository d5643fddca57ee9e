/**
 * Console pages for bulk uploads: the list with a new-upload form (`/console/uploads`), a job's
 * page with live progress, its failed and skipped rows and the error report (`/console/uploads/{id}`;
 * the rows' reasons and the report for admin and operator only, as in the API).
 * The form posts to the same receiver as `POST /v1/bulk-uploads` (receiveBulkUpload) and starts
 * with startBulkUpload, as `POST /v1/bulk-uploads/{id}/start` does.
 */
import { pipeline } from 'node:stream/promises';
import { Router, type Request, type Response } from 'express';
import { z } from 'zod';
import { getBulkUpload, listBulkUploads, startBulkUpload, type BulkUploadJson } from '../../lib/aggregator/bulk/upload-jobs.ts';
import { loadSuggestions, type StoredSuggestions } from '../../lib/aggregator/bulk/suggest.ts';
import { getSavedMapping, listSavedMappings } from '../../lib/aggregator/bulk/saved-mappings.ts';
import { createPreview, getPreview, type PreviewJson } from '../../lib/aggregator/bulk/preview.ts';
import type { PlatformContext } from '../../lib/context.ts';
import { ObjectNotFoundError } from '../../lib/platform/storage.ts';
import { receiveBulkUpload } from '../aggregator/bulk-uploads.ts';
import { streamUploadProgress } from '../aggregator/bulk-upload-events.ts';
import type { Caller } from '../http/auth.ts';
import { HttpError } from '../http/errors.ts';
import type { StreamCaller } from '../http/event-stream.ts';
import { parse } from '../http/validation.ts';
import { consoleRole, languageOf, renderPage, translator } from './render.ts';
import { openJson } from '../../lib/aggregator/bulk/sealed.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
/** Failed and skipped rows per page of a job's table. */
export const ROWS_PER_PAGE = 25;
const pageQuery = z.object({ page: z.coerce.number().int().min(1).max(100_000).default(1) });
const jobQuery = pageQuery.extend({ preview: z.uuid().optional() });
/** Rows a console dry run reads (the API allows up to 1000; a page shows these). */
export const DRY_RUN_ROWS = 50;
const PREVIEW_POLL_MS = 50;

const callerOf = (res: Response) => res.locals.caller as Caller;

export function uploadPages(ctx: PlatformContext): Router {
  const router = Router();
  const receive = receiveBulkUpload(ctx);

  const jobOf = async (req: Request, res: Response): Promise<BulkUploadJson> => {
    const id = String(req.params.id);
    const job = UUID.test(id) ? await getBulkUpload(ctx.pool, callerOf(res).aggregatorId, id.toLowerCase()) : null;
    if (!job) throw new HttpError(404, translator(languageOf(req))('uploads.notfound', { id }));
    return job;
  };

  router.get('/uploads', async (req, res) => {
    const { page } = parse(pageQuery, req.query, 'query');
    const caller = callerOf(res);
    const limit = 50;
    const [{ jobs, total }, mappings] = await Promise.all([
      listBulkUploads(ctx.pool, caller.aggregatorId, { page, limit }),
      listSavedMappings(ctx.pool, caller.aggregatorId),
    ]);
    const domains = [...caller.domains].map((name) => ({ name, label: ctx.network.domains.get(name)?.label ?? name }));
    const selected = typeof req.query.mapping === 'string' ? mappings.find((m) => m.id === req.query.mapping) : undefined;
    renderPage(req, res, 'uploads', {
      selectedMapping: selected?.id, selectedType: selected?.participant_type, jobs, total, page, hasMore: page * limit < total, domains, mappings: mappings.filter((m) => !m.retired_at && caller.domains.has(m.participant_type)),
    });
  });

  router.post('/uploads', consoleRole('admin', 'operator'), async (req, res) => {
    if (!req.is('multipart/form-data')) throw new HttpError(415, translator(languageOf(req))('uploads.multipart'));
    const job = await receive(req, res);
    res.redirect(303, `/console/uploads/${job.upload_id}`);
  });

  router.get('/uploads/:id', async (req, res) => {
    const job = await jobOf(req, res);
    const { page, preview: previewId } = parse(jobQuery, req.query, 'query');
    // Row reasons quote cells: admin and operator only, as the API's /errors and /previews (docs/decisions.md, "Trust II").
    const seesReasons = callerOf(res).roles.some((r) => r === 'admin' || r === 'operator');
    // A sync upload starts with the count its dry run found: the newest whole-file dry run is shown when none is asked for.
    const shownPreview = previewId ?? (job.sync && job.status === 'pending' ? await latestWholeFilePreview(job.upload_id) : undefined);
    const preview = shownPreview && seesReasons ? await getPreview(ctx.pool, ctx.pii, job.upload_id, shownPreview) : null;
    // Before the start, an operator sees how the file's columns match the fields, to save as a mapping.
    // As the worker stored them when the file came in (never computed here: no read of the file per page load).
    let suggestions: StoredSuggestions | null = null;
    let suggestionProblem: string | null = null;
    if (job.status === 'pending' && callerOf(res).roles.some((r) => r === 'admin' || r === 'operator')) {
      const t = translator(languageOf(req));
      const stored = await loadSuggestions(ctx.pool, job.upload_id);
      if (!stored) suggestionProblem = t('match.pending');
      else if ('file_problem' in stored) suggestionProblem = t('match.unreadable', { problem: stored.file_problem });
      else suggestions = stored;
    }
    const mapping = job.mapping_id ? await getSavedMapping(ctx.pool, callerOf(res).aggregatorId, job.mapping_id, job.mapping_version ?? undefined) : null;
    type Reason = { field: string | null; message: string };
    const { rows } = await ctx.pool.query<{ row_number: number; outcome: string; sealed: string | null; errors: Reason[] | null }>(
      `SELECT row_number, outcome, sealed, errors FROM aggregator.bulk_upload_rows WHERE upload_id = $1
        ORDER BY row_number LIMIT $2 OFFSET $3`, [job.upload_id, ROWS_PER_PAGE + 1, (page - 1) * ROWS_PER_PAGE]);
    const fields = new Map((ctx.network.domains.get(job.participant_type)?.fields ?? []).map((f) => [f.name, f.label]));
    // The reasons are stored sealed with the row's cells (they may quote them): opened for the caller's page only.
    const problemRows = rows.slice(0, ROWS_PER_PAGE).map(({ row_number, outcome, sealed, errors }) => ({
      row_number, outcome,
      errors: !seesReasons ? [] : (sealed ? openJson<{ errors: Reason[] }>(ctx.pii, sealed).errors : errors ?? []).map((e) => ({ ...e, label: e.field ? fields.get(e.field) ?? e.field : null })),
    }));
    const view = req.header('hx-request') === 'true' && (req.header('hx-target') ?? '').includes('problem-rows') ? 'upload-rows' : 'upload';
    renderPage(req, res, view, { shown: shownValue, job, seesReasons, suggestions, suggestionProblem, mappingName: mapping?.name ?? null, rows: problemRows, page, hasMore: rows.length > ROWS_PER_PAGE, perPage: ROWS_PER_PAGE, preview, fieldLabel: (name: string | null) => (name ? fields.get(name) ?? name : null) });
  });

  router.post('/uploads/:id/start', consoleRole('admin', 'operator'), async (req, res) => {
    const job = await jobOf(req, res);
    const t = translator(languageOf(req));
    if ((req.body as Record<string, string>).attestation !== 'true') {
      throw new HttpError(400, t('uploads.attestation.required'), { fields: { attestation: ['required'] } });
    }
    const caller = callerOf(res);
    const body = req.body as Record<string, string>;
    const confirmPause = body.confirm_pause !== undefined && /^\d{1,9}$/.test(body.confirm_pause) ? Number(body.confirm_pause) : undefined;
    const started = await startBulkUpload(ctx.pool, caller.aggregatorId, job.upload_id, caller.subject,
      { confirmPause, allowLargePause: body.allow_large_pause === 'true', maxPauseFraction: ctx.config.BULK_SYNC_MAX_PAUSE_FRACTION });
    switch (started.outcome) {
      case 'failed': throw new HttpError(409, t('uploads.failed', { reason: started.job.status_reason ?? '' }));
      case 'confirm_pause_required':
      case 'dry_run_required': throw new HttpError(409, t('upload.sync.needsdryrun'));
      case 'pause_mismatch': throw new HttpError(409, t('upload.sync.mismatch', { count: started.pauseCount, confirmed: confirmPause ?? 0 }));
      case 'large_pause': throw new HttpError(409, t('upload.sync.large.refused', { count: started.pauseCount, participants: started.participants }));
      default: res.redirect(303, `/console/uploads/${job.upload_id}`);
    }
  });

  // A dry run of a pending job by the worker (as POST /v1/bulk-uploads/{id}/preview), shown on the job page.
  router.post('/uploads/:id/preview', consoleRole('admin', 'operator'), async (req, res) => {
    const job = await jobOf(req, res);
    if (job.status !== 'pending') throw new HttpError(409, translator(languageOf(req))('dryrun.notpending'));
    let preview: PreviewJson = await createPreview(ctx.pool, ctx.pii, job.upload_id, DRY_RUN_ROWS, callerOf(res).subject);
    // A whole-file comparison (upsert, update) may take longer than the page waits: the page then offers a reload.
    const deadline = Date.now() + ctx.config.BULK_PREVIEW_WAIT_MS;
    while (preview.status === 'pending' && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, PREVIEW_POLL_MS));
      preview = (await getPreview(ctx.pool, ctx.pii, job.upload_id, preview.preview_id))!;
    }
    res.redirect(303, `/console/uploads/${job.upload_id}?preview=${preview.preview_id}#dry-run`);
  });

  router.get('/uploads/:id/events', async (req, res) => {
    await streamUploadProgress(ctx, res.locals.streamCaller as StreamCaller, String(req.params.id), res);
  });

  // Admin and operator only, as GET /v1/bulk-uploads/{id}/errors: the report holds the rows' raw cells.
  router.get('/uploads/:id/errors.csv', consoleRole('admin', 'operator'), async (req, res) => {
    const job = await jobOf(req, res);
    const t = translator(languageOf(req));
    if (!job.errors_csv_object_key) throw new HttpError(404, t('uploads.noreport'));
    let body;
    try {
      body = await ctx.storage.get(job.errors_csv_object_key);
    } catch (err) {
      if (err instanceof ObjectNotFoundError) throw new HttpError(404, t('uploads.noreport'));
      throw err;
    }
    res.status(200).type('text/csv; charset=utf-8').attachment(`bulk-upload-${job.upload_id}-errors.csv`);
    await pipeline(body, res);
  });

  /** The newest completed whole-file dry run of upload `uploadId` (what a sync start confirms), or undefined. */
  async function latestWholeFilePreview(uploadId: string): Promise<string | undefined> {
    const { rows } = await ctx.pool.query<{ preview_id: string }>(
      `SELECT preview_id FROM aggregator.bulk_upload_previews WHERE upload_id = $1 AND status = 'completed' AND whole_file
        ORDER BY completed_at DESC LIMIT 1`, [uploadId]);
    return rows[0]?.preview_id;
  }

  return router;
}

/** A value of a dry run's change as the page shows it (null: empty). */
function shownValue(value: unknown): string {
  if (value === null || value === undefined || value === '') return '—';
  return Array.isArray(value) ? value.join(', ') : String(value);
}
