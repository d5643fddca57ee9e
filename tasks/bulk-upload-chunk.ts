/**
 * Task `bulk-upload-chunk` {upload_id, chunk_index}: onboards one staged chunk of rows, all in one
 * transaction, then enqueues the next chunk (or `bulk-upload-finish`) in that transaction. Chunks
 * thus run one at a time in file order, whatever retries happen (graphile-worker reorders a named
 * queue when a job fails, so a queue alone would not guarantee it).
 *
 * Each row ends as exactly one of:
 * - failed: every field error of coercion (lib/bulk/row-coercion.ts), or signals refused the item;
 * - skipped: its phone, e-mail or external id is already registered with this aggregator, or
 *   appeared in an earlier row of this file (earlier chunks are committed before this one runs);
 * - passed: participant stored (identity encrypted) and pushed to signals as an item.
 *
 * Order inside the transaction: participants are inserted first (their unique indexes guard
 * against a concurrent upload), then pushed to signals (HTTP, batched), then marked pushed with
 * the lifecycle status signals answered; row outcomes, the chunk's "done" mark and the job's
 * counters commit together. A failed push throws: the transaction rolls back and graphile-worker
 * retries the chunk. Participant ids are derived from upload id and row number, so the retry
 * pushes the same items again (signals answers `unchanged`) and nothing is created twice.
 */
import type { Task } from 'graphile-worker';
import { matchHeaders } from '../lib/bulk/header-match.ts';
import { withReportColumnsIgnored } from '../lib/bulk/error-report.ts';
import { createRowCoercer, type CoercedParticipant, type FieldError, type RowOutcome } from '../lib/bulk/row-coercion.ts';
import {
  CHUNK_TASK, FINISH_TASK, loadBulkUpload, type BulkUploadRecord, type ChunkPayload, type UploadPayload,
} from '../lib/bulk/upload-jobs.ts';
import type { PlatformContext } from '../lib/context.ts';
import { withTransaction, type PoolClient } from '../lib/db.ts';
import { enqueue } from '../lib/jobs.ts';
import type { Domain } from '../lib/network.ts';
import {
  bulkParticipantId, deleteParticipants, findRegistered, insertParticipants, markPushed, participantItem,
  participantKeys, type NewParticipant, type RegisteredParticipant,
} from '../lib/participants.ts';
import { createSignalsClient } from '../lib/signals-client.ts';
import type { StagedRow } from './bulk-upload-stage.ts';

interface RowResult {
  rowNumber: number;
  cells: string[];
  outcome: 'failed' | 'skipped';
  errors: FieldError[];
}

type Coercer = (values: string[]) => RowOutcome;

/** Field names of the domain's duplicate keys, for the messages of skipped rows. */
function keyFields(domain: Domain) {
  return {
    phone: domain.fields.find((f) => f.identity === 'phone')?.name ?? 'phone',
    email: domain.fields.find((f) => f.identity === 'email')?.name ?? 'email',
    externalId: domain.fields.find((f) => f.externalId)?.name ?? 'external_id',
  };
}

export function bulkUploadChunk(ctx: PlatformContext): Task {
  // Coercers are compiled once per upload (the last few uploads seen by this worker).
  const coercers = new Map<string, Coercer>();
  const coercerFor = (job: BulkUploadRecord, domain: Domain): Coercer => {
    let coerce = coercers.get(job.upload_id);
    if (!coerce) {
      const headers = job.headers ?? [];
      const mapping = matchHeaders(domain, headers, withReportColumnsIgnored(headers, job.column_map, new Set(domain.fields.map((f) => f.name))));
      coerce = createRowCoercer(ctx.network, domain, mapping);
      coercers.set(job.upload_id, coerce);
      if (coercers.size > 8) coercers.delete(coercers.keys().next().value!);
    }
    return coerce;
  };

  return async (payload) => {
    const { upload_id: uploadId, chunk_index: chunkIndex } = payload as ChunkPayload;
    await withTransaction(ctx.pool, async (client) => {
      const { rows: [chunk] } = await client.query<{ rows: StagedRow[] | null; done_at: string | null }>(
        `SELECT rows, done_at FROM aggregator.bulk_upload_chunks WHERE upload_id = $1 AND chunk_index = $2 FOR UPDATE`,
        [uploadId, chunkIndex]);
      if (!chunk || chunk.done_at) return;
      const job = await loadBulkUpload(client, uploadId);
      if (!job || job.status !== 'running') return;
      const domain = ctx.network.domains.get(job.participant_type)!;
      const results = await onboardRows(client, job, domain, coercerFor(job, domain), chunk.rows ?? []);

      const passed = (chunk.rows?.length ?? 0) - results.length;
      const failed = results.filter((r) => r.outcome === 'failed').length;
      const skipped = results.length - failed;
      if (results.length) {
        await client.query(
          `INSERT INTO aggregator.bulk_upload_rows (upload_id, row_number, outcome, cells, errors)
           SELECT $1, x.row_number, x.outcome, x.cells, x.errors
             FROM json_to_recordset($2::json) AS x(row_number integer, outcome text, cells jsonb, errors jsonb)`,
          [uploadId, JSON.stringify(results.map((r) => ({ row_number: r.rowNumber, outcome: r.outcome, cells: r.cells, errors: r.errors })))]);
      }
      await client.query(
        `UPDATE aggregator.bulk_upload_chunks SET done_at = now(), rows = NULL, passed = $3, failed = $4, skipped = $5
          WHERE upload_id = $1 AND chunk_index = $2`, [uploadId, chunkIndex, passed, failed, skipped]);
      const { rows: [progress] } = await client.query<{ chunks_done: number; chunk_count: number }>(
        `UPDATE aggregator.bulk_uploads
            SET passed = passed + $2, failed = failed + $3, skipped = skipped + $4, chunks_done = chunks_done + 1, updated_at = now()
          WHERE upload_id = $1 RETURNING chunks_done, chunk_count`, [uploadId, passed, failed, skipped]);
      if (chunkIndex + 1 < progress.chunk_count) {
        await enqueue(client, {
          task: CHUNK_TASK, payload: { upload_id: uploadId, chunk_index: chunkIndex + 1 } satisfies ChunkPayload,
          jobKey: `${CHUNK_TASK}:${uploadId}:${chunkIndex + 1}`,
        });
      } else {
        await enqueue(client, { task: FINISH_TASK, payload: { upload_id: uploadId } satisfies UploadPayload, jobKey: `${FINISH_TASK}:${uploadId}` });
      }
    });
  };

  /**
   * Coerces, de-duplicates, stores and pushes `rows`; returns the rows that did not pass.
   * @throws SignalsUnavailableError (the caller's transaction rolls back; the chunk is retried)
   */
  async function onboardRows(client: PoolClient, job: BulkUploadRecord, domain: Domain, coerce: Coercer, rows: StagedRow[]): Promise<RowResult[]> {
    const results: RowResult[] = [];
    const candidates: (NewParticipant & { participant: CoercedParticipant; cells: string[] })[] = [];
    for (const [rowNumber, cells] of rows) {
      const outcome = coerce(cells);
      if (!outcome.ok) {
        results.push({ rowNumber, cells, outcome: 'failed', errors: outcome.errors });
        continue;
      }
      candidates.push({
        participantId: bulkParticipantId(job.upload_id, rowNumber), participant: outcome.participant,
        keys: participantKeys(ctx.pii, outcome.participant), bulkUploadId: job.upload_id, rowNumber, cells,
      });
    }

    // Skip rows whose keys are registered already, or taken by an earlier row of this chunk.
    const registered = await findRegistered(client, job.aggregator_id, domain.name, candidates.map((c) => c.keys));
    const fields = keyFields(domain);
    const seen = { phone: new Map<string, number>(), email: new Map<string, number>(), externalId: new Map<string, number>() };
    const describe = (field: string, found: RegisteredParticipant | undefined, earlierRow: number | undefined): FieldError | null => {
      if (earlierRow !== undefined) return { field, message: `${field} repeats row ${earlierRow} of this file` };
      if (!found) return null;
      return found.bulk_upload_id === job.upload_id && found.row_number !== null
        ? { field, message: `${field} repeats row ${found.row_number} of this file` }
        : { field, message: `${field} already registered with this aggregator` };
    };
    const fresh: typeof candidates = [];
    for (const c of candidates) {
      const phone = c.keys.phoneIndex?.toString('hex');
      const email = c.keys.emailIndex?.toString('hex');
      const externalId = c.keys.externalId;
      const reasons = [
        phone === undefined ? null : describe(fields.phone, registered.phone.get(phone), seen.phone.get(phone)),
        email === undefined ? null : describe(fields.email, registered.email.get(email), seen.email.get(email)),
        externalId === undefined ? null : describe(fields.externalId, registered.externalId.get(externalId), seen.externalId.get(externalId)),
      ].filter((r): r is FieldError => r !== null);
      if (reasons.length) {
        results.push({ rowNumber: c.rowNumber!, cells: c.cells, outcome: 'skipped', errors: reasons });
        continue;
      }
      if (phone !== undefined) seen.phone.set(phone, c.rowNumber!);
      if (email !== undefined) seen.email.set(email, c.rowNumber!);
      if (externalId !== undefined) seen.externalId.set(externalId, c.rowNumber!);
      fresh.push(c);
    }

    const scope = { aggregatorId: job.aggregator_id, orgId: job.org_id, domain };
    const inserted = await insertParticipants(client, ctx.pii, scope, fresh);
    const stored = fresh.filter((c) => {
      if (inserted.has(c.participantId)) return true;
      // Taken meanwhile by another upload or registration of this aggregator (unique index).
      const field = c.keys.phoneIndex ? fields.phone : c.keys.emailIndex ? fields.email : fields.externalId;
      results.push({ rowNumber: c.rowNumber!, cells: c.cells, outcome: 'skipped', errors: [{ field, message: `${field} already registered with this aggregator` }] });
      return false;
    });

    // ctx.urls are final only once the services listen, so the client is made per chunk.
    const signals = createSignalsClient({ baseUrl: ctx.urls.signals, apiKey: ctx.internalApiKey, maxBodyBytes: ctx.config.HTTP_BODY_LIMIT });
    const origin = { createdBy: `aggregator:${job.aggregator_id}`, instanceUrl: ctx.urls.aggregator };
    const answers = await signals.pushItems(stored.map((c) => participantItem(ctx.network, domain, c.participantId, c.participant, origin)));
    const pushed: { participantId: string; lifecycleStatus: NonNullable<(typeof answers)[number]['lifecycle_status']> }[] = [];
    const refused: string[] = [];
    stored.forEach((c, i) => {
      const answer = answers[i];
      if (answer.outcome === 'invalid' || answer.outcome === 'conflict' || !answer.lifecycle_status) {
        refused.push(c.participantId);
        results.push({ rowNumber: c.rowNumber!, cells: c.cells, outcome: 'failed', errors: [{ field: '(item)', message: `signals refused the item: ${answer.message ?? answer.outcome}` }] });
      } else {
        pushed.push({ participantId: c.participantId, lifecycleStatus: answer.lifecycle_status });
      }
    });
    await deleteParticipants(client, refused);
    await markPushed(client, pushed);
    return results.sort((a, b) => a.rowNumber - b.rowNumber);
  }
}
