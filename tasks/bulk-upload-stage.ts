/**
 * Task `bulk-upload-stage` {upload_id}: reads the stored file once, from start to end, matches its
 * header row to the participant schema and stages the data rows in chunks of
 * BULK_UPLOAD_CHUNK_ROWS consecutive rows (aggregator.bulk_upload_chunks, one encrypted JSON value
 * per chunk: few, large writes; lib/aggregator/bulk/sealed.ts). Then it records the header, total_rows and the chunk count and
 * enqueues one `bulk-upload-chunk` job per chunk.
 *
 * Repetitions within the file are settled here, in file order, so that the chunks are independent
 * and may run in parallel: a row that passes coercion and repeats the phone, e-mail or external id
 * of an earlier row that passed is staged with those earlier rows, and will be skipped. (A row
 * that fails coercion claims nothing: a later row with its phone may pass.) The keys are held in
 * memory while the file is read (about 100 bytes per distinct key).
 *
 * The whole file is read before any row is onboarded: a file-level problem (unreadable file,
 * header that does not match, malformed CSV mid-file) fails the job with the reason and nothing
 * onboarded. A retried attempt starts the staging over; a finished staging is never redone.
 */
import type { Task } from 'graphile-worker';
import { withReportColumnsIgnored } from '../lib/aggregator/bulk/error-report.ts';
import { matchHeaders } from '../lib/aggregator/bulk/header-match.ts';
import { createRowCoercer } from '../lib/aggregator/bulk/row-coercion.ts';
import { openTable } from '../lib/aggregator/bulk/open-table.ts';
import { TableFormatError, tableLimits, type Table } from '../lib/aggregator/bulk/table.ts';
import {
  CHUNK_TASK, failBulkUpload, FINISH_TASK, loadBulkUpload, type ChunkPayload, type UploadPayload,
} from '../lib/aggregator/bulk/upload-jobs.ts';
import type { PlatformContext } from '../lib/context.ts';
import { withTransaction } from '../lib/platform/db.ts';
import { sealJson } from '../lib/aggregator/bulk/sealed.ts';
import { enqueue, enqueueMany } from '../lib/platform/jobs.ts';
import { createRepeatTracker, type Repeat } from '../lib/aggregator/bulk/duplicates.ts';

/** A staged row: spreadsheet row number, cells, and the earlier rows it repeats (if any). */
export type StagedRow = [rowNumber: number, cells: string[], repeats?: Repeat[]];

/** The `bulk-upload-stage` task (see the module comment); idempotent: a staged job is left alone. */
export function bulkUploadStage(ctx: PlatformContext): Task {
  return async (payload, helpers) => {
    const { upload_id: uploadId } = payload as UploadPayload;
    const job = await loadBulkUpload(ctx.pool, uploadId);
    if (!job || job.status !== 'running' || job.staged_at) return;
    const domain = ctx.network.domains.get(job.participant_type);
    if (!domain) {
      await failBulkUpload(ctx.pool, uploadId, `participant type ${job.participant_type} is not a domain of network ${ctx.network.id}`);
      return;
    }
    // A previous attempt may have staged part of the file.
    await ctx.pool.query('DELETE FROM aggregator.bulk_upload_chunks WHERE upload_id = $1', [uploadId]);

    const chunkRows = ctx.config.BULK_UPLOAD_CHUNK_ROWS;
    const repeatsOf = createRepeatTracker(domain);
    let chunks = 0;
    let total = 0;
    let table: Table | undefined;
    // One chunk is written while the next is read.
    let writing: Promise<unknown> = Promise.resolve();
    const write = async (rows: StagedRow[]) => {
      const index = chunks++;
      await writing;
      writing = ctx.pool.query(
        `INSERT INTO aggregator.bulk_upload_chunks (upload_id, chunk_index, first_row_number, last_row_number, row_count, rows_sealed)
         VALUES ($1, $2, $3, $4, $5, $6)`,
        [uploadId, index, rows[0][0], rows[rows.length - 1][0], rows.length, sealJson(ctx.pii, rows)]);
      writing.catch(() => {});
    };
    try {
      table = await openTable(() => ctx.storage.get(job.file_object_key), job.file_format, tableLimits(ctx.config),
        () => ctx.storage.scan(job.file_object_key));
      const fieldNames = new Set(domain.fields.map((f) => f.name));
      const coerce = createRowCoercer(ctx.network, domain,
        matchHeaders(domain, table.headers, withReportColumnsIgnored(table.headers, job.column_map, fieldNames)));
      let rows: StagedRow[] = [];
      // Blank rows never reach here (lib/aggregator/bulk/table.ts skips them).
      for await (const row of table.rows) {
        total++;
        const repeats = repeatsOf(coerce(row.values), row.rowNumber);
        rows.push(repeats ? [row.rowNumber, row.values, repeats] : [row.rowNumber, row.values]);
        if (rows.length === chunkRows) {
          await write(rows);
          rows = [];
        }
      }
      if (rows.length) await write(rows);
      await writing;
    } catch (err) {
      table?.close();
      await writing.catch(() => {});
      if (!(err instanceof TableFormatError)) throw err;
      await ctx.pool.query('DELETE FROM aggregator.bulk_upload_chunks WHERE upload_id = $1', [uploadId]);
      await failBulkUpload(ctx.pool, uploadId, err.message);
      helpers.logger.info(`bulk upload ${uploadId} failed: ${err.message}`);
      return;
    }

    await withTransaction(ctx.pool, async (client) => {
      const { rowCount } = await client.query(
        `UPDATE aggregator.bulk_uploads
            SET headers = $2, encoding = $3, sheet = $4, staged_at = now(), total_rows = $5, chunk_count = $6, updated_at = now()
          WHERE upload_id = $1 AND status = 'running' AND staged_at IS NULL`,
        [uploadId, table!.headers, table!.encoding ?? null, table!.sheet ?? null, total, chunks]);
      if (!rowCount) return;
      if (chunks === 0) {
        await enqueue(client, { task: FINISH_TASK, payload: { upload_id: uploadId } satisfies UploadPayload, jobKey: `${FINISH_TASK}:${uploadId}` });
        return;
      }
      await enqueueMany(client, Array.from({ length: chunks }, (_, index) => ({
        task: CHUNK_TASK, payload: { upload_id: uploadId, chunk_index: index } satisfies ChunkPayload, jobKey: `${CHUNK_TASK}:${uploadId}:${index}`,
      })));
    });
  };
}
