/**
 * Task `bulk-upload-chunk` {upload_id, chunk_index}: onboards one staged chunk of rows in one
 * transaction. Chunks are independent (staging settled the repetitions within the file), so
 * several may run at once; the one that completes the count enqueues `bulk-upload-finish`.
 *
 * Each row ends as exactly one of:
 * - failed: every field error of coercion (lib/bulk/row-coercion.ts), or signals refused the item;
 *   in upsert and update uploads also a row that would take another participant's phone, e-mail
 *   or external id (lib/aggregator/bulk/upsert.ts);
 * - skipped: it repeats an earlier row of the file (see tasks/bulk-upload-stage.ts); in create
 *   uploads its phone, e-mail or external id is already registered with this aggregator; in update
 *   uploads it names no registered participant;
 * - created: participant stored (identity encrypted) and pushed to signals as an item;
 * - updated (upsert, update): its participant changed, under the same item id, pushed again, the
 *   changed fields' names recorded in `participant_changes`; a participant a sync upload paused is
 *   made live again;
 * - unchanged (upsert, update): nothing written (most are settled at staging, by content hash).
 * `passed` counts created + updated + unchanged.
 *
 * Inside the transaction, batch by batch (signals' request size): participants are inserted first
 * (their unique indexes find keys already registered, and guard against a concurrent upload or
 * registration; only rows left out are looked up, for their reasons), then pushed to signals
 * over HTTP while the next batch is prepared. Row outcomes, the chunk's "done" mark and the job's
 * counters commit together, after every push succeeded. A failed push throws: the transaction
 * rolls back and graphile-worker retries the chunk. Participant ids derive from upload id and row
 * number, so the retry pushes the very same items again (signals answers `unchanged`) and nothing
 * is created or counted twice. An update compares with what is stored and is written only if the
 * participant still holds what it compared with (else the chunk rolls back and is retried), so a
 * retried chunk finds the same changes, and two uploads changing one participant apply in turn,
 * the later over the earlier.
 */
import type { Task } from 'graphile-worker';
import { withReportColumnsIgnored, type SealedRow } from '../lib/aggregator/bulk/error-report.ts';
import { openJson, sealJson } from '../lib/aggregator/bulk/sealed.ts';
import { matchHeaders } from '../lib/aggregator/bulk/header-match.ts';
import { createRowCoercer, type CoercedParticipant, type FieldError, type RowOutcome } from '../lib/aggregator/bulk/row-coercion.ts';
import { FINISH_TASK, loadBulkUpload, type BulkUploadRecord, type ChunkPayload, type UploadPayload } from '../lib/aggregator/bulk/upload-jobs.ts';
import type { PlatformContext } from '../lib/context.ts';
import { withTransaction, type PoolClient } from '../lib/platform/db.ts';
import type { ItemInput, LifecycleStatus } from '../lib/network/items.ts';
import { enqueue } from '../lib/platform/jobs.ts';
import { goLiveStatus, type Domain } from '../lib/network/config.ts';
import {
  backfillContentHashes, bulkParticipantIds, deleteParticipants, findRegistered, insertParticipants, participantItem, participantKeys,
  recordChanges, recordLifecycle, updateParticipants, writeParticipants, type NewParticipant, type ParticipantChange, type ParticipantUpdate, type StoredColumns,
} from '../lib/aggregator/participants.ts';
import { mappedFields, planRows, type PlanScope, type StoredParticipant } from '../lib/aggregator/bulk/upsert.ts';
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

interface Coercer {
  coerce: (values: string[]) => RowOutcome;
  /** The fields the upload's mapping sets (an update changes only those). */
  mapped: Set<string>;
}

/** A row to push: a participant created, or one updated (`stored` as it was, for undoing a refused push). */
interface Candidate extends NewParticipant {
  rowNumber: number;
  cells: string[];
  item: ItemInput;
  /** `undo`: the participant's columns as read (`storedColumns`), as JSON text, to write back if signals refuses the item. */
  update?: { undo: string; fields: string[]; resume: boolean };
}

/** What a chunk's rows came to. */
interface ChunkOutcome {
  /** The rows that did not pass. */
  results: RowResult[];
  created: number;
  updated: number;
  unchanged: number;
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
      coerce = { coerce: createRowCoercer(ctx.network, domain, mapping), mapped: mappedFields(mapping) };
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
      const { results, created, updated, unchanged } = await onboardRows(client, job, domain, coercerFor(job, domain), rows);

      const failed = results.filter((r) => r.outcome === 'failed').length;
      const skipped = results.length - failed;
      const passed = created + updated + unchanged;
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
        `UPDATE aggregator.bulk_upload_chunks SET done_at = now(), rows = NULL, rows_sealed = NULL, passed = $3, failed = $4, skipped = $5,
                created = $6, updated = $7, unchanged = $8
          WHERE upload_id = $1 AND chunk_index = $2`, [uploadId, chunkIndex, passed, failed, skipped, created, updated, unchanged]);
      // The row lock of this update orders chunks finishing together: exactly one sees the last count.
      const { rows: [progress] } = await client.query<{ chunks_done: number; chunk_count: number }>(
        `UPDATE aggregator.bulk_uploads
            SET passed = passed + $2, failed = failed + $3, skipped = skipped + $4, created = created + $5, updated = updated + $6,
                unchanged = unchanged + $7, chunks_done = chunks_done + 1, updated_at = now()
          WHERE upload_id = $1 RETURNING chunks_done, chunk_count`, [uploadId, passed, failed, skipped, created, updated, unchanged]);
      if (progress.chunks_done === progress.chunk_count) {
        await enqueue(client, { task: FINISH_TASK, payload: { upload_id: uploadId } satisfies UploadPayload, jobKey: `${FINISH_TASK}:${uploadId}` });
      }
    });
  };

  /**
   * Coerces, checks, stores and pushes `rows` (taking them out of the array batch by batch);
   * returns the rows that did not pass and the counts of those that did. Works in batches
   * of the size signals takes per request: while one batch is pushed, the next is coerced and
   * stored (at most PUSHES_IN_FLIGHT pushes at a time).
   * @throws SignalsUnavailableError (the caller's transaction rolls back; the chunk is retried)
   */
  async function onboardRows(client: PoolClient, job: BulkUploadRecord, domain: Domain, coercer: Coercer, rows: StagedRow[]): Promise<ChunkOutcome> {
    const results: RowResult[] = [];
    const fields = keyFields(domain);
    const participantIdOf = bulkParticipantIds(job.upload_id);
    const scope = { aggregatorId: job.aggregator_id, orgId: job.org_id, domain };
    const plan: PlanScope | undefined = job.mode === 'create' ? undefined
      : { aggregatorId: job.aggregator_id, uploadId: job.upload_id, domain, mode: job.mode, mapped: coercer.mapped };
    // ctx.urls are final only once the services listen, so the client is made per chunk.
    const signals = createSignalsClient({ baseUrl: ctx.urls.signals, apiKey: ctx.internalApiKey, maxBodyBytes: ctx.config.HTTP_BODY_LIMIT });
    const origin = { createdBy: `aggregator:${job.aggregator_id}`, instanceUrl: ctx.urls.aggregator };
    // Refused new participants (deleted), refused changes (written back as they were read).
    const refusedNew: string[] = [];
    const undone: StoredColumns[] = [];
    const answeredOtherwise: { participantId: string; lifecycleStatus: LifecycleStatus }[] = [];
    // What the chunk keeps of a change once pushed (not the candidate: its participant, item and cells are garbage then).
    const updated: { participantId: string; rowNumber: number; fields: string[]; resumeTo?: LifecycleStatus }[] = [];
    let created = 0;
    let unchanged = 0;
    const inFlight = new Set<Promise<void>>();
    let pushFailure: unknown;

    const candidate = (rowNumber: number, cells: string[], participantId: string, participant: CoercedParticipant, keys = participantKeys(ctx.pii, participant)): Candidate => {
      const item = participantItem(ctx.network, domain, participantId, participant, origin);
      return {
        participantId, participant, keys, item,
        lifecycleStatus: goLiveStatus(domain, item.item_state), bulkUploadId: job.upload_id, rowNumber, cells,
      };
    };

    /** Coerces and checks a batch, stores what is new or changed; returns the participants to push. */
    const store = async (batch: StagedRow[]): Promise<Candidate[]> => {
      const coerced: { rowNumber: number; cells: string[]; participant: CoercedParticipant }[] = [];
      for (const [rowNumber, cells, repeats] of batch) {
        if (repeats) {
          results.push({ rowNumber, cells, outcome: 'skipped', errors: repeatReasons(repeats) });
          continue;
        }
        const outcome = coercer.coerce(cells);
        if (!outcome.ok) results.push({ rowNumber, cells, outcome: 'failed', errors: outcome.errors });
        else coerced.push({ rowNumber, cells, participant: outcome.participant });
      }
      let candidates: Candidate[];
      let changed: Candidate[] = [];
      if (!plan) {
        candidates = coerced.map((c) => candidate(c.rowNumber, c.cells, participantIdOf(c.rowNumber), c.participant));
      } else {
        ({ candidates, changed } = await planAndUpdate(coerced));
      }
      // Inserted first: the unique indexes find the keys already registered with the aggregator, so
      // only the rows left out are looked up (for their reasons), not every row of every batch.
      const inserted = await insertParticipants(client, ctx.pii, scope, candidates);
      created += inserted.size;
      const left = candidates.filter((c) => !inserted.has(c.participantId));
      if (left.length) {
        const registered = await findRegistered(client, job.aggregator_id, domain.name, left.map((c) => c.keys));
        for (const c of left) {
          const reasons = registeredReasons(domain, job.upload_id, c.keys, registered);
          // None found: its holder was deleted meanwhile (the generic reason; the row was not stored).
          const field = (c.keys.phoneIndex ? fields.phone : c.keys.emailIndex ? fields.email : fields.externalId) ?? '(row)';
          results.push({
            // An upsert fails a row taking another's key (taken since its plan was made); create skips it.
            rowNumber: c.rowNumber, cells: c.cells, outcome: plan ? 'failed' : 'skipped',
            errors: reasons.length ? reasons : [{ field, message: `${field} already registered with this aggregator` }],
          });
        }
      }
      return [...(left.length ? candidates.filter((c) => inserted.has(c.participantId)) : candidates), ...changed];
    };

    /**
     * Upsert and update uploads: plans the coerced rows against their stored participants (locked),
     * writes the changed ones; answers the participants to create and those changed.
     */
    const planAndUpdate = async (coerced: { rowNumber: number; cells: string[]; participant: CoercedParticipant }[]) => {
      const plans = await planRows(client, ctx.pii, plan!, coerced.map((c) => ({ participant: c.participant, keys: participantKeys(ctx.pii, c.participant) })));
      const candidates: Candidate[] = [];
      const changed: Candidate[] = [];
      const backfill: { participantId: string; hash: Buffer }[] = [];
      const updates: ParticipantUpdate[] = [];
      plans.forEach((p, i) => {
        const { rowNumber, cells, participant } = coerced[i];
        if (p.kind === 'create') candidates.push(candidate(rowNumber, cells, participantIdOf(rowNumber), participant));
        else if (p.kind === 'unchanged') {
          unchanged++;
          if (p.backfill) backfill.push({ participantId: p.stored.participant_id, hash: p.backfill });
        } else if (p.kind !== 'update') {
          results.push({ rowNumber, cells, outcome: p.kind, errors: p.errors });
        } else {
          const c = candidate(rowNumber, cells, p.stored.participant_id, p.participant, p.keys);
          // What signals will answer: a paused or retired item keeps its status through an update.
          if (p.stored.lifecycle_status === 'paused' || p.stored.lifecycle_status === 'retired') c.lifecycleStatus = p.stored.lifecycle_status;
          const fields = p.changes.map((ch) => ch.field);
          // The stored row is kept as one string until the push is answered (to undo a refused
          // one), not as read (profile object, arrays, buffers), for each of up to 3,000 rows a
          // chunk has in flight (the worker's peak RSS, issue 30).
          c.update = { undo: JSON.stringify(storedColumns(p.stored)), fields, resume: p.resume };
          changed.push(c);
          updates.push({
            participantId: c.participantId, participant: c.participant, keys: c.keys, contentHash: p.hash, resume: p.resume,
            expectedHash: p.stored.content_hash, kept: keptCiphertexts(domain, p.stored, fields),
          });
        }
      });
      await backfillContentHashes(client, backfill);
      await updateParticipants(client, ctx.pii, scope, updates);
      return { candidates, changed };
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
          if (c.update) undone.push(JSON.parse(c.update.undo) as StoredColumns);
          else refusedNew.push(c.participantId);
          results.push({ rowNumber: c.rowNumber, cells: c.cells, outcome: 'failed', errors: [{ field: '(item)', message: `signals refused the item: ${answer.message ?? answer.outcome}` }] });
          return;
        }
        if (c.update) {
          updated.push({
            participantId: c.participantId, rowNumber: c.rowNumber, fields: c.update.fields,
            resumeTo: c.update.resume ? goLiveStatus(domain, c.item.item_state) : undefined,
          });
        }
        if (answer.lifecycle_status !== c.lifecycleStatus) {
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
    // A refused new participant goes; a refused change is undone (the participant as it was read).
    created -= refusedNew.length;
    await deleteParticipants(client, refusedNew);
    await writeParticipants(client, job.aggregator_id, undone);
    await resumePaused(answeredOtherwise);
    await recordLifecycle(client, answeredOtherwise);
    await recordChanges(client, job.aggregator_id, updated.flatMap((c): ParticipantChange[] => [
      ...(c.fields.length ? [{ participantId: c.participantId, uploadId: job.upload_id, rowNumber: c.rowNumber, kind: 'updated' as const, fields: c.fields }] : []),
      ...(c.resumeTo ? [{ participantId: c.participantId, uploadId: job.upload_id, rowNumber: c.rowNumber, kind: 'resumed' as const, fields: ['lifecycle_status'] }] : []),
    ]));
    return { results: results.sort((a, b) => a.rowNumber - b.rowNumber), created, updated: updated.length, unchanged };

    /**
     * Makes the participants a sync upload paused, and this file holds again, live (or draft, as
     * the go-live rules say) in signals; their answered statuses join `statuses`.
     */
    async function resumePaused(statuses: { participantId: string; lifecycleStatus: LifecycleStatus }[]): Promise<void> {
      const resumed = updated.filter((c) => c.resumeTo);
      if (!resumed.length) return;
      const answers = await signals.setLifecycle(resumed.map((c) => ({ item_id: c.participantId, lifecycle_status: c.resumeTo! })));
      answers.forEach((a, i) => {
        if (a.lifecycle_status) statuses.push({ participantId: resumed[i].participantId, lifecycleStatus: a.lifecycle_status });
      });
    }
  }
}

/** The stored ciphertexts of the identity fields of `domain` an update leaves unchanged (`changed`: the names of the fields it changes). */
function keptCiphertexts(domain: Domain, stored: StoredParticipant, changed: string[]): ParticipantUpdate['kept'] {
  const kept: ParticipantUpdate['kept'] = {};
  for (const field of domain.fields) {
    if (field.identity && !changed.includes(field.name)) kept[field.identity] = stored[`${field.identity}_encrypted`] ?? null;
  }
  return kept;
}

/** A participant's columns as read (`findMatches` with `full`), to write back. */
function storedColumns(stored: StoredParticipant): StoredColumns {
  return {
    participant_id: stored.participant_id,
    name_encrypted: stored.name_encrypted ?? null,
    phone_encrypted: stored.phone_encrypted ?? null,
    email_encrypted: stored.email_encrypted ?? null,
    phone_index: stored.phone_index?.toString('hex') ?? null,
    email_index: stored.email_index?.toString('hex') ?? null,
    external_id: stored.external_id,
    profile: stored.profile ?? {},
    locations: stored.locations ?? [],
    content_hash: stored.content_hash?.toString('hex') ?? null,
    resume: false,
  };
}
