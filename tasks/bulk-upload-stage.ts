/**
 * Task `bulk-upload-stage` {upload_id}: reads the stored file once, from start to end, matches its
 * header row to the participant schema and stages the data rows in chunks of
 * BULK_UPLOAD_CHUNK_ROWS consecutive rows (aggregator.bulk_upload_chunks, one encrypted JSON value
 * per chunk: few, large writes; lib/aggregator/bulk/sealed.ts), the rows after the last full chunk
 * split across the worker's slots (`lastChunks`). Then it records the header, total_rows and the chunk count and
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
 *
 * Upsert and update uploads (issue 30): each row's participant is looked up here, 1000 rows a
 * query, and a row whose content hash equals its participant's is settled as `unchanged` — not
 * staged, nothing written — so that re-uploading a list costs a read per row (where few rows are
 * unchanged, the lookups pause and the chunks settle them: `createUnchangedFilter`). A sync upload also
 * finds the participants the file no longer holds (lib/aggregator/bulk/upsert.ts), which are
 * paused once its rows are done; more than the operator confirmed at start fails the job before
 * anything is written.
 */
import type { Task } from 'graphile-worker';
import { withReportColumnsIgnored } from '../lib/aggregator/bulk/error-report.ts';
import { matchHeaders } from '../lib/aggregator/bulk/header-match.ts';
import { createRowCoercer, type RowKeys } from '../lib/aggregator/bulk/row-coercion.ts';
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
import { findMatches, participantsNotHeld, refreshParticipantStatistics, resumable } from '../lib/aggregator/bulk/upsert.ts';
import { contentHash, participantKeys } from '../lib/aggregator/participants.ts';
import type { PiiCrypto } from '../lib/platform/crypto.ts';
import type { Domain } from '../lib/network/config.ts';
import type { Pool } from '../lib/platform/db.ts';

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
    if (job.mode !== 'create') await refreshParticipantStatistics(ctx.pool);
    const settle = job.mode === 'create' ? undefined : createUnchangedFilter(ctx.pool, ctx.pii, job.aggregator_id, domain, job.sync);
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
      const stage = async (staged: StagedRow[]) => {
        for (const row of staged) {
          rows.push(row);
          if (rows.length === chunkRows) {
            await write(rows);
            rows = [];
          }
        }
      };
      // Blank rows never reach here (lib/aggregator/bulk/table.ts skips them). Rows come in
      // batches, and each batch is awaited once: a promise per row cost more than the row's own
      // work when an upsert re-reads a list that has not changed.
      for await (const batch of table.batches) {
        const staged: StagedRow[] = [];
        for (const row of batch) {
          total++;
          const outcome = coerce(row.values);
          const repeats = repeatsOf(outcome, row.rowNumber);
          const stagedRow: StagedRow = repeats ? [row.rowNumber, row.values, repeats] : [row.rowNumber, row.values];
          if (!settle) staged.push(stagedRow);
          else settle.offer(stagedRow, outcome.ok ? outcome.participant : outcome.keys, outcome.ok && !repeats ? outcome.participant.profile : undefined);
        }
        await stage(settle ? await settle.settled() : staged);
      }
      if (settle) await stage(await settle.drain());
      for (const part of lastChunks(rows, ctx.config.WORKER_CONCURRENCY)) await write(part);
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

    const toPause = job.sync && settle ? await settle.toPause() : [];
    if (job.sync && toPause.length > (job.confirm_pause ?? 0)) {
      await ctx.pool.query('DELETE FROM aggregator.bulk_upload_chunks WHERE upload_id = $1', [uploadId]);
      await failBulkUpload(ctx.pool, uploadId, `the file now leaves ${toPause.length} participants to pause, more than the ${job.confirm_pause ?? 0} `
        + 'confirmed at start (participants were added since the dry run); nothing was written: upload the file again and confirm the new count');
      return;
    }
    const unchanged = settle?.unchanged() ?? 0;
    await withTransaction(ctx.pool, async (client) => {
      const { rowCount } = await client.query(
        `UPDATE aggregator.bulk_uploads
            SET headers = $2, encoding = $3, sheet = $4, staged_at = now(), total_rows = $5, chunk_count = $6, updated_at = now(),
                unchanged = unchanged + $7, passed = passed + $7, to_pause = CASE WHEN sync THEN $8::int END
          WHERE upload_id = $1 AND status = 'running' AND staged_at IS NULL`,
        [uploadId, table!.headers, table!.encoding ?? null, table!.sheet ?? null, total, chunks, unchanged, toPause.length]);
      if (!rowCount) return;
      if (toPause.length) {
        await client.query(
          'INSERT INTO aggregator.bulk_upload_pauses (upload_id, participant_id) SELECT $1, unnest($2::uuid[]) ON CONFLICT DO NOTHING',
          [uploadId, toPause]);
      }
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

/** Fewest rows in a chunk cut from the last one (`lastChunks`). */
const MIN_SPLIT_ROWS = 500;

/**
 * The rows left after the last full chunk, as up to `slots` chunks of at least MIN_SPLIT_ROWS
 * rows (consecutive, in file order; none when `rows` is empty). A full chunk per slot keeps every
 * slot of a worker busy on a large file, but the rows after them, or all the rows an upsert
 * changed in a file where few changed, were one chunk that one slot onboarded while the others
 * idled: 2,673 changed rows of the 266,978-row file took 1.7–2.4 s of a 13–16 s run that way.
 */
export function lastChunks<T>(rows: T[], slots: number): T[][] {
  const parts = Math.max(1, Math.min(slots, Math.floor(rows.length / MIN_SPLIT_ROWS)));
  const size = Math.ceil(rows.length / parts);
  const chunks: T[][] = [];
  for (let at = 0; at < rows.length; at += size) chunks.push(rows.slice(at, at + size));
  return chunks;
}

/** Rows looked up per query while staging an upsert (one query for this many rows). */
const LOOKUP_ROWS = 1000;
/** Lookups under way at once while the file is read on. */
const LOOKUPS_IN_FLIGHT = 2;
/** A looked-up batch with fewer unchanged rows than this share stops the lookups of a non-sync upload... */
const LOOKUP_MIN_UNCHANGED = 0.25;
/** ...but for this many batches only, the last of which is looked up again (a probe). */
const LOOKUP_PAUSE_BATCHES = 10;

/**
 * Settles the unchanged rows of an upsert or update upload while its file is staged (see the
 * module comment). `offer(row, keys, profile)` takes rows in file order, and a lookup starts for
 * every LOOKUP_ROWS of them; `settled()` answers the rows to stage of the lookups that must be
 * finished before more are started (in file order; none while fewer than LOOKUPS_IN_FLIGHT run),
 * and `drain()` those of all the rest at the end. `keys` (a passed row's participant, or a failed
 * row's keys) name the row's participant, and only a row with its `profile` (it passed coercion and
 * repeats no earlier row) can be unchanged. `unchanged()` counts the rows settled; `toPause()`
 * (sync) lists the live and draft participants of the domain no row named.
 *
 * Where few rows are unchanged (a list whose rows mostly changed), the lookups cost more than they
 * settle: a batch with fewer than LOOKUP_MIN_UNCHANGED of its rows unchanged pauses them for
 * LOOKUP_PAUSE_BATCHES batches, which are staged as they are (the chunks compare their rows with
 * the stored participants anyway), the last one looked up to see whether to go on. A sync upload
 * looks up every row: it must know every participant its file holds.
 */
export function createUnchangedFilter(pool: Pool, pii: PiiCrypto, aggregatorId: string, domain: Domain, sync: boolean) {
  interface Offered { row: StagedRow; keys?: RowKeys; profile?: Record<string, unknown> }
  let batch: Offered[] = [];
  const inFlight: Promise<StagedRow[]>[] = [];
  const held = new Set<string>();
  let unchanged = 0;
  let batches = 0;
  /** The first batch looked up again after a pause. */
  let lookUpFrom = 0;

  const lookup = async (offered: Offered[], index: number): Promise<StagedRow[]> => {
    const keyed = offered.flatMap((o) => (o.keys ? [{
      o, keys: participantKeys(pii, o.keys), hash: o.profile ? contentHash(pii, domain, o.profile) : undefined,
    }] : []));
    const matches = await findMatches(pool, aggregatorId, domain, keyed.map((k) => k.keys));
    const staged: StagedRow[] = [];
    const settled = new Set<Offered>();
    keyed.forEach(({ o, hash }, i) => {
      const stored = matches[i];
      if (!stored) return;
      if (sync) held.add(stored.participant_id);
      if (hash && stored.content_hash?.equals(hash) && !resumable(stored)) settled.add(o);
    });
    for (const o of offered) {
      if (settled.has(o)) unchanged++;
      else staged.push(o.row);
    }
    if (!sync && settled.size < LOOKUP_MIN_UNCHANGED * offered.length) lookUpFrom = Math.max(lookUpFrom, index + LOOKUP_PAUSE_BATCHES);
    return staged;
  };
  const flush = () => {
    if (batch.length) {
      const index = batches++;
      // Paused: staged as they are, in file order with the batches before (the queue is in order).
      const looking = index < lookUpFrom ? Promise.resolve(batch.map((o) => o.row)) : lookup(batch, index);
      looking.catch(() => {}); // awaited in turn; a failure is thrown there, not as an unhandled rejection
      inFlight.push(looking);
    }
    batch = [];
  };

  return {
    offer(row: StagedRow, keys: RowKeys | undefined, profile: Record<string, unknown> | undefined): void {
      batch.push({ row, keys, profile });
      if (batch.length === LOOKUP_ROWS) flush();
    },
    async settled(): Promise<StagedRow[]> {
      const done: StagedRow[] = [];
      while (inFlight.length > LOOKUPS_IN_FLIGHT) done.push(...await inFlight.shift()!);
      return done;
    },
    async drain(): Promise<StagedRow[]> {
      flush();
      return (await Promise.all(inFlight.splice(0))).flat();
    },
    unchanged: () => unchanged,
    toPause: () => participantsNotHeld(pool, aggregatorId, domain, held),
  };
}
