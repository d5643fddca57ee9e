/**
 * Task `bulk-upload-suggest` {upload_id}: the match suggestions of a received bulk upload
 * (lib/aggregator/bulk/suggest.ts), computed once from the file's header and its first
 * MATCH_SAMPLE_ROWS data rows, and stored with the job. `POST /v1/bulk-uploads/{id}/match` and the
 * console's job page read them: the services never read the file for them (issue 29).
 *
 * A file that cannot be read (TableFormatError) or is no longer stored gets its problem stored
 * instead, which the route answers as 422. Other errors (storage unreachable) are retried by
 * graphile-worker. Idempotent: stored suggestions are left alone.
 */
import type { Task } from 'graphile-worker';
import { openTable } from '../lib/aggregator/bulk/open-table.ts';
import { MATCH_SAMPLE_ROWS, loadSuggestions, storeSuggestions, suggestMapping } from '../lib/aggregator/bulk/suggest.ts';
import { TableFormatError, tableLimits } from '../lib/aggregator/bulk/table.ts';
import { loadBulkUpload, type UploadPayload } from '../lib/aggregator/bulk/upload-jobs.ts';
import type { PlatformContext } from '../lib/context.ts';
import { ObjectNotFoundError } from '../lib/platform/storage.ts';

/** The `bulk-upload-suggest` task (see the module comment). */
export function bulkUploadSuggest(ctx: PlatformContext): Task {
  return async (payload) => {
    const { upload_id: uploadId } = payload as UploadPayload;
    const job = await loadBulkUpload(ctx.pool, uploadId);
    const domain = job && ctx.network.domains.get(job.participant_type);
    if (!job || !domain || job.purged_at || await loadSuggestions(ctx.pool, uploadId)) return;
    let table;
    try {
      table = await openTable(() => ctx.storage.get(job.file_object_key), job.file_format, tableLimits(ctx.config),
        () => ctx.storage.scan(job.file_object_key));
    } catch (err) {
      if (err instanceof TableFormatError) await storeSuggestions(ctx.pool, uploadId, { file_problem: err.message });
      else if (err instanceof ObjectNotFoundError) await storeSuggestions(ctx.pool, uploadId, { file_problem: 'the file is no longer stored' });
      else throw err;
      return;
    }
    const sample: string[][] = [];
    try {
      for await (const row of table.rows) {
        sample.push(row.values);
        if (sample.length === MATCH_SAMPLE_ROWS) break;
      }
    } catch (err) {
      // A malformed row later on does not spoil the suggestions from the rows before it.
      if (!(err instanceof TableFormatError)) throw err;
    } finally {
      table.close();
    }
    await storeSuggestions(ctx.pool, uploadId, { headers: table.headers, ...suggestMapping(ctx.network, domain, table.headers, sample, job.column_map) });
  };
}
