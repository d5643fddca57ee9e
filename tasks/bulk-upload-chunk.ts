/**
 * Task `bulk-upload-chunk` {upload_id, chunk_index}: onboards one staged chunk of rows in one
 * transaction. Chunks are independent (staging settled the repetitions within the file), so
 * several may run at once; the one that completes the count enqueues `bulk-upload-finish`.
 *
 * Each row ends as exactly one of:
 * - failed: every field error of coercion (lib/bulk/row-coercion.ts), or signals refused the item;
 * - skipped: it repeats an earlier row of the file (see tasks/bulk-upload-stage.ts), or its phone,
 *   e-mail or external id is already registered with this aggregator;
 * - passed: participant stored (identity encrypted) and pushed to signals as an item.
 *
 * Inside the transaction, batch by batch (signals' request size): participants are inserted first
 * (their unique indexes find keys already registered, and guard against a concurrent upload or
 * registration; only rows left out are looked up, for their reasons), then pushed to signals
 * over HTTP while the next batch is prepared. Row outcomes, the chunk's "done" mark and the job's
 * counters commit together, after every push succeeded. A failed push throws: the transaction
 * rolls back and graphile-worker retries the chunk. Participant ids derive from upload id and row
 * number, so the retry pushes the very same items again (signals answers `unchanged`) and nothing
 * is created or counted twice.
 */
import type { Task } from 'graphile-worker';
import { withReportColumnsIgnored, type SealedRow } from '../lib/aggregator/bulk/error-report.ts';
import { openJson, sealJson } from '../lib/aggregator/bulk/sealed.ts';
import { matchHeaders } from '../lib/aggregator/bulk/header-match.ts';
import { createRowCoercer, type FieldError, type RowOutcome } from '../lib/aggregator/bulk/row-coercion.ts';
import { FINISH_TASK, loadBulkUpload, type BulkUploadRecord, type ChunkPayload, type UploadPayload } from '../lib/aggregator/bulk/upload-jobs.ts';
import type { PlatformContext } from '../lib/context.ts';
import { withTransaction, type PoolClient } from '../lib/platform/db.ts';
import type { ItemInput, LifecycleStatus } from '../lib/network/items.ts';
import { enqueue } from '../lib/platform/jobs.ts';
import { goLiveStatus, type Domain } from '../lib/network/config.ts';
import {
  bulkParticipantIds, deleteParticipants, findRegistered, insertParticipants, participantItem, participantKeys,
  recordLifecycle, type NewParticipant,
} from '../lib/aggregator/participants.ts';
import { createSignalsClient, itemPerson, MAX_ITEMS_PER_REQUEST } from '../lib/clients/signals-client.ts';
import { keyFields, registeredReasons, repeatReasons } from '../lib/aggregator/bulk/duplicates.ts';
import type { StagedRow } from './bulk-upload-stage.ts';

/** What a staged row's slot holds once its batch is taken (see onboardRows). */
const RELEASED: StagedRow = [0, []];

/** Pushes to signals one chunk may have under way at once (each of up to MAX_ITEMS_PER_REQUEST items). */
const PUSHES_IN_FLIGHT = 2;

interface RowResult {
  rowNumber: number;
  cells: string[];
  outcome: 'failed' | 'skipped';
  errors: FieldError[];
}

type Coercer = (values: string[]) => RowOutcome;

interface Candidate extends NewParticipant {
  rowNumber: number;
  cells: string[];
  item: ItemInput;
}

/** The `bulk-upload-chunk` task (see the module comment); idempotent: a chunk marked done is left alone. */
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
      const { rows: [chunk] } = await client.query<{ rows: StagedRow[] | null; rows_sealed: string | null; done_at: string | null }>(
        `SELECT rows, rows_sealed, done_at FROM aggregator.bulk_upload_chunks WHERE upload_id = $1 AND chunk_index = $2 FOR UPDATE`,
        [uploadId, chunkIndex]);
      if (!chunk || chunk.done_at) return;
      const job = await loadBulkUpload(client, uploadId);
      if (!job || job.status !== 'running') return;
      const domain = ctx.network.domains.get(job.participant_type)!;
      // Chunks staged before issue 15 hold plaintext `rows`. The sealed text (~1 MB) is let go at once.
      const rows = chunk.rows_sealed ? openJson<StagedRow[]>(ctx.pii, chunk.rows_sealed) : chunk.rows ?? [];
      chunk.rows_sealed = null;
      const rowCount = rows.length;
      const results = await onboardRows(client, job, domain, coercerFor(job, domain), rows);

      const failed = results.filter((r) => r.outcome === 'failed').length;
      const skipped = results.length - failed;
      const passed = rowCount - results.length;
      if (results.length) {
        // Cells and reasons (which may quote a cell) encrypted: PII at rest (lib/aggregator/bulk/sealed.ts).
        await client.query(
          `INSERT INTO aggregator.bulk_upload_rows (upload_id, row_number, outcome, sealed)
           SELECT $1, x.row_number, x.outcome, x.sealed
             FROM json_to_recordset($2::json) AS x(row_number integer, outcome text, sealed text)`,
          [uploadId, JSON.stringify(results.map((r) => ({
            row_number: r.rowNumber, outcome: r.outcome, sealed: sealJson(ctx.pii, { cells: r.cells, errors: r.errors } satisfies SealedRow),
          })))]);
      }
      await client.query(
        `UPDATE aggregator.bulk_upload_chunks SET done_at = now(), rows = NULL, rows_sealed = NULL, passed = $3, failed = $4, skipped = $5
          WHERE upload_id = $1 AND chunk_index = $2`, [uploadId, chunkIndex, passed, failed, skipped]);
      // The row lock of this update orders chunks finishing together: exactly one sees the last count.
      const { rows: [progress] } = await client.query<{ chunks_done: number; chunk_count: number }>(
        `UPDATE aggregator.bulk_uploads
            SET passed = passed + $2, failed = failed + $3, skipped = skipped + $4, chunks_done = chunks_done + 1, updated_at = now()
          WHERE upload_id = $1 RETURNING chunks_done, chunk_count`, [uploadId, passed, failed, skipped]);
      if (progress.chunks_done === progress.chunk_count) {
        await enqueue(client, { task: FINISH_TASK, payload: { upload_id: uploadId } satisfies UploadPayload, jobKey: `${FINISH_TASK}:${uploadId}` });
      }
    });
  };

  /**
   * Coerces, checks, stores and pushes `rows` (taking them out of the array batch by batch);
   * returns the rows that did not pass. Works in batches
   * of the size signals takes per request: while one batch is pushed, the next is coerced and
   * inserted (at most PUSHES_IN_FLIGHT pushes at a time).
   * @throws SignalsUnavailableError (the caller's transaction rolls back; the chunk is retried)
   */
  async function onboardRows(client: PoolClient, job: BulkUploadRecord, domain: Domain, coerce: Coercer, rows: StagedRow[]): Promise<RowResult[]> {
    const results: RowResult[] = [];
    const fields = keyFields(domain);
    const participantIdOf = bulkParticipantIds(job.upload_id);
    const scope = { aggregatorId: job.aggregator_id, orgId: job.org_id, domain };
    // ctx.urls are final only once the services listen, so the client is made per chunk.
    const signals = createSignalsClient({ baseUrl: ctx.urls.signals, apiKey: ctx.internalApiKey, maxBodyBytes: ctx.config.HTTP_BODY_LIMIT });
    const origin = { createdBy: `aggregator:${job.aggregator_id}`, instanceUrl: ctx.urls.aggregator };
    const refused: string[] = [];
    const answeredOtherwise: { participantId: string; lifecycleStatus: LifecycleStatus }[] = [];
    const inFlight = new Set<Promise<void>>();
    let pushFailure: unknown;

    /** Coerces and checks a batch, inserts what is new; returns the participants stored. */
    const store = async (batch: StagedRow[]): Promise<Candidate[]> => {
      const candidates: Candidate[] = [];
      for (const [rowNumber, cells, repeats] of batch) {
        if (repeats) {
          results.push({ rowNumber, cells, outcome: 'skipped', errors: repeatReasons(repeats) });
          continue;
        }
        const outcome = coerce(cells);
        if (!outcome.ok) {
          results.push({ rowNumber, cells, outcome: 'failed', errors: outcome.errors });
          continue;
        }
        const participantId = participantIdOf(rowNumber);
        const item = participantItem(ctx.network, domain, participantId, outcome.participant, origin);
        candidates.push({
          participantId, participant: outcome.participant, keys: participantKeys(ctx.pii, outcome.participant), item,
          lifecycleStatus: goLiveStatus(domain, item.item_state), bulkUploadId: job.upload_id, rowNumber, cells,
        });
      }
      // Inserted first: the unique indexes find the keys already registered with the aggregator, so
      // only the rows left out are looked up (for their reasons), not every row of every batch.
      const inserted = await insertParticipants(client, ctx.pii, scope, candidates);
      const left = candidates.filter((c) => !inserted.has(c.participantId));
      if (left.length) {
        const registered = await findRegistered(client, job.aggregator_id, domain.name, left.map((c) => c.keys));
        for (const c of left) {
          const reasons = registeredReasons(domain, job.upload_id, c.keys, registered);
          // None found: its holder was deleted meanwhile (the generic reason; the row was not stored).
          const field = (c.keys.phoneIndex ? fields.phone : c.keys.emailIndex ? fields.email : fields.externalId) ?? '(row)';
          results.push({
            rowNumber: c.rowNumber, cells: c.cells, outcome: 'skipped',
            errors: reasons.length ? reasons : [{ field, message: `${field} already registered with this aggregator` }],
          });
        }
      }
      return left.length ? candidates.filter((c) => inserted.has(c.participantId)) : candidates;
    };

    /**
     * The one place bulk onboarding pushes to signals: stored participants as items (built by
     * `participantItem` in `store`), then signals' answers sorted into refused and re-statused.
     */
    const pushToSignals = async (stored: Candidate[]): Promise<void> => {
      // Each item names its person (ciphertexts and blind indexes only), so signals links it to the person's user.
      const answers = await signals.pushItems(stored.map((c) => {
        const person = itemPerson(ctx.pii, c.participant.identity);
        return person ? { ...c.item, person } : c.item;
      }));
      stored.forEach((c, i) => {
        const answer = answers[i];
        if (answer.outcome === 'invalid' || answer.outcome === 'conflict' || !answer.lifecycle_status) {
          refused.push(c.participantId);
          results.push({ rowNumber: c.rowNumber, cells: c.cells, outcome: 'failed', errors: [{ field: '(item)', message: `signals refused the item: ${answer.message ?? answer.outcome}` }] });
        } else if (answer.lifecycle_status !== c.lifecycleStatus) {
          answeredOtherwise.push({ participantId: c.participantId, lifecycleStatus: answer.lifecycle_status });
        }
      });
    };

    const rowCount = rows.length;
    for (let i = 0; i < rowCount && pushFailure === undefined; i += MAX_ITEMS_PER_REQUEST) {
      const batch = rows.slice(i, i + MAX_ITEMS_PER_REQUEST);
      // The chunk's array lets go of the batch: once pushed, a passed row's cells are garbage
      // (failed and skipped rows keep theirs in `results`), so the chunk does not hold all of its
      // 5,000 rows until it commits; less live data, a lower peak of the worker's heap (issue 17).
      rows.fill(RELEASED, i, i + batch.length);
      const stored = await store(batch);
      while (inFlight.size >= PUSHES_IN_FLIGHT) await Promise.race(inFlight);
      const pushing: Promise<void> = pushToSignals(stored).catch((err) => { pushFailure ??= err; }).finally(() => inFlight.delete(pushing));
      inFlight.add(pushing);
    }
    await Promise.all(inFlight);
    if (pushFailure !== undefined) throw pushFailure;
    await deleteParticipants(client, refused);
    await recordLifecycle(client, answeredOtherwise);
    return results.sort((a, b) => a.rowNumber - b.rowNumber);
  }
}
