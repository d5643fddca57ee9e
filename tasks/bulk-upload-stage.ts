/**
 * Task `bulk-upload-stage` {upload_id}: reads the stored file once, from start to end, matches its
 * header row to the participant schema and stages the data rows in chunks of
 * BULK_UPLOAD_CHUNK_ROWS consecutive rows (aggregator.bulk_upload_chunks, one JSON value per
 * chunk: few, large writes). Then it records the header, total_rows and the chunk count and
 * enqueues the first chunk; each chunk enqueues the next one (tasks/bulk-upload-chunk.ts).
 *
 * The whole file is read before any row is onboarded: a file-level problem (unreadable file,
 * header that does not match, malformed CSV mid-file) fails the job with the reason and nothing
 * onboarded. A retried attempt starts the staging over; a finished staging is never redone.
 */
import type { Task } from 'graphile-worker';
import { withReportColumnsIgnored } from '../lib/bulk/error-report.ts';
import { matchHeaders } from '../lib/bulk/header-match.ts';
import { openTable, TableFormatError, type Table } from '../lib/bulk/table.ts';
import {
  CHUNK_TASK, failBulkUpload, FINISH_TASK, loadBulkUpload, type ChunkPayload, type UploadPayload,
} from '../lib/bulk/upload-jobs.ts';
import type { PlatformContext } from '../lib/context.ts';
import { withTransaction } from '../lib/db.ts';
import { enqueue } from '../lib/jobs.ts';

/** A staged row: [spreadsheet row number, cells]. */
export type StagedRow = [number, string[]];

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
    let chunks = 0;
    let total = 0;
    let table: Table | undefined;
    // One chunk is written while the next is read.
    let writing: Promise<unknown> = Promise.resolve();
    const write = async (rows: StagedRow[]) => {
      const index = chunks++;
      await writing;
      writing = ctx.pool.query(
        `INSERT INTO aggregator.bulk_upload_chunks (upload_id, chunk_index, first_row_number, last_row_number, row_count, rows)
         VALUES ($1, $2, $3, $4, $5, $6::jsonb)`,
        [uploadId, index, rows[0][0], rows[rows.length - 1][0], rows.length, JSON.stringify(rows)]);
      writing.catch(() => {});
    };
    try {
      table = await openTable(() => ctx.storage.get(job.file_object_key), job.file_format);
      const fieldNames = new Set(domain.fields.map((f) => f.name));
      matchHeaders(domain, table.headers, withReportColumnsIgnored(table.headers, job.column_map, fieldNames));
      let rows: StagedRow[] = [];
      // Blank rows never reach here (lib/bulk/table.ts skips them).
      for await (const row of table.rows) {
        rows.push([row.rowNumber, row.values]);
        total++;
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
      if (chunks > 0) {
        await enqueue(client, { task: CHUNK_TASK, payload: { upload_id: uploadId, chunk_index: 0 } satisfies ChunkPayload, jobKey: `${CHUNK_TASK}:${uploadId}:0` });
      } else {
        await enqueue(client, { task: FINISH_TASK, payload: { upload_id: uploadId } satisfies UploadPayload, jobKey: `${FINISH_TASK}:${uploadId}` });
      }
    });
  };
}
