/**
 * Dry runs of a bulk upload (issue 17, `POST /v1/bulk-uploads/{id}/preview`; table
 * aggregator.bulk_upload_previews): the first N data rows of the job's file go through the real
 * header matching, coercion and validation and the real duplicate rules (lib/aggregator/bulk/duplicates.ts:
 * repeats within those rows, keys already registered with the aggregator), and each gets the
 * outcome the real run would give — writing no participant and pushing nothing.
 *
 * One difference remains: the real run also fails a row that signals refuses (`invalid`,
 * `conflict`), which only the push can tell.
 *
 * An upsert or update job's dry run (issue 30) reads the whole file: it counts every row's outcome
 * (created, updated, unchanged, failed, skipped: lib/aggregator/bulk/upsert.ts, as the real run
 * decides them), lists the first N rows that are not unchanged — an update with each changed
 * field's value before and after, identity fields masked — and, for a sync job, counts the
 * participants the file leaves out, which the real run would pause, and lists the first of them.
 * That count is what the start's `confirm_pause` must repeat.
 */
import { randomUUID } from 'node:crypto';
import type { Readable } from 'node:stream';
import type { Pool, Queryable } from '../../platform/db.ts';
import { withTransaction } from '../../platform/db.ts';
import { enqueue, JOB_PRIORITY } from '../../platform/jobs.ts';
import type { PiiCrypto } from '../../platform/crypto.ts';
import type { Domain, Network } from '../../network/config.ts';
import { contentHash, findRegistered, participantKeys, type ParticipantKeys } from '../participants.ts';
import {
  findMatches, mappedFields, participantsNotHeld, planRows, refreshParticipantStatistics, shownValue, type KeyedRow, type PlanScope, type RowOutcomeKind,
} from './upsert.ts';
import { createRepeatTracker, registeredReasons, repeatReasons } from './duplicates.ts';
import { withReportColumnsIgnored } from './error-report.ts';
import { openJson, sealJson } from './sealed.ts';
import { matchHeaders } from './header-match.ts';
import { openTable } from './open-table.ts';
import { createRowCoercer, type FieldError } from './row-coercion.ts';
import { DEFAULT_TABLE_LIMITS, TableFormatError, type Table, type TableLimits } from './table.ts';
import type { BulkUploadRecord } from './upload-jobs.ts';

export const PREVIEW_TASK = 'bulk-upload-preview';
export const MAX_PREVIEW_ROWS = 1000;

export interface PreviewPayload {
  preview_id: string;
}

export type PreviewOutcome = 'passed' | 'failed' | 'skipped' | RowOutcomeKind;

export interface PreviewRow {
  row_number: number;
  outcome: PreviewOutcome;
  errors: FieldError[];
  /** For a passing (created) row: the fields as they would be stored, private ones (phone, e-mail) left out. */
  values?: Record<string, unknown>;
  /** For an updated row: each changed field's value before and after (null: absent), identity fields masked. */
  changes?: { field: string; before: unknown; after: unknown }[];
  /** For an updated row: the participant it changes. */
  participant_id?: string;
}

/** A participant a sync upload would pause, as a dry run lists it (its name masked). */
export interface PausedParticipant {
  participant_id: string;
  external_id: string | null;
  name: unknown;
  lifecycle_status: string | null;
}

/** What a dry run found (stored as the preview's `result`). */
export interface PreviewResult {
  rows_read: number;
  /**
   * Would-be counts over the rows read: passed, failed, skipped; an upsert or update job's
   * dry run also created, updated and unchanged (passed is their sum).
   */
  counts: Partial<Record<PreviewOutcome, number>>;
  rows: PreviewRow[];
  /** True when the whole file was read (upsert and update jobs): the counts are the file's. */
  whole_file?: boolean;
  /** Sync jobs: how many participants the file leaves out (the count to confirm at start), and the first of them. */
  pause?: { count: number; participants: PausedParticipant[] };
  headers: string[];
  /** Columns no field takes. */
  ignored_columns: string[];
  encoding: string | null;
  sheet: string | null;
  /** A file-level problem: the real run would fail the job with this reason, onboarding nothing. */
  file_problem: string | null;
}

/** A preview as the API returns it. */
export interface PreviewJson extends Partial<PreviewResult> {
  preview_id: string;
  upload_id: string;
  status: 'pending' | 'completed' | 'failed';
  rows_requested: number;
  created_at: string;
  completed_at: string | null;
}

/**
 * Runs the dry run of `job` over its first `limit` data rows (see the module comment). Reads the
 * stored file through `open` (a fresh stream per call) and the aggregator's participants through `db`.
 * @throws errors of storage or the database (the task is retried); never for file content.
 */
export async function previewUpload(deps: { db: Queryable; pii: PiiCrypto; network: Network; limits?: TableLimits }, job: BulkUploadRecord, domain: Domain,
  limit: number, open: () => Promise<Readable>): Promise<PreviewResult> {
  if (job.mode !== 'create') return previewChanges(deps, job, domain, limit, open);
  const result: PreviewResult = {
    rows_read: 0, counts: { passed: 0, failed: 0, skipped: 0 }, rows: [], headers: [], ignored_columns: [], encoding: null, sheet: null, file_problem: null,
  };
  let table: Table | undefined;
  const pending: { row: PreviewRow; keys: ParticipantKeys }[] = [];
  const privateFields = new Set(domain.fields.filter((f) => f.private).map((f) => f.name));
  try {
    table = await openTable(open, job.file_format, deps.limits ?? DEFAULT_TABLE_LIMITS);
    Object.assign(result, { headers: table.headers, encoding: table.encoding ?? null, sheet: table.sheet ?? null });
    const mapping = matchHeaders(domain, table.headers,
      withReportColumnsIgnored(table.headers, job.column_map, new Set(domain.fields.map((f) => f.name))));
    result.ignored_columns = mapping.ignored;
    const coerce = createRowCoercer(deps.network, domain, mapping);
    const repeatsOf = createRepeatTracker(domain);
    for await (const { rowNumber, values } of table.rows) {
      const outcome = coerce(values);
      const repeats = repeatsOf(outcome, rowNumber);
      if (repeats) result.rows.push({ row_number: rowNumber, outcome: 'skipped', errors: repeatReasons(repeats) });
      else if (!outcome.ok) result.rows.push({ row_number: rowNumber, outcome: 'failed', errors: outcome.errors });
      else {
        const shown = Object.fromEntries(Object.entries(outcome.participant.profile).filter(([k]) => !privateFields.has(k)));
        const row: PreviewRow = { row_number: rowNumber, outcome: 'passed', errors: [], values: shown };
        result.rows.push(row);
        pending.push({ row, keys: participantKeys(deps.pii, outcome.participant) });
      }
      if (result.rows.length === limit) break;
    }
  } catch (err) {
    if (!(err instanceof TableFormatError)) throw err;
    result.file_problem = err.message;
  } finally {
    table?.close();
  }
  // Keys already registered with the aggregator, in one query.
  const registered = await findRegistered(deps.db, job.aggregator_id, domain.name, pending.map((p) => p.keys));
  for (const { row, keys } of pending) {
    const reasons = registeredReasons(domain, job.upload_id, keys, registered);
    if (reasons.length) Object.assign(row, { outcome: 'skipped', errors: reasons, values: undefined });
  }
  result.rows_read = result.rows.length;
  for (const row of result.rows) result.counts[row.outcome] = (result.counts[row.outcome] ?? 0) + 1;
  return result;
}

/** Rows planned per query by an upsert's dry run. */
const PLAN_ROWS = 1000;
/** Participants a sync dry run lists of those it would pause. */
const PAUSE_LISTED = 50;

/** The dry run of an upsert or update job over its whole file (see the module comment). */
async function previewChanges(deps: { db: Queryable; pii: PiiCrypto; network: Network; limits?: TableLimits }, job: BulkUploadRecord, domain: Domain,
  limit: number, open: () => Promise<Readable>): Promise<PreviewResult> {
  await refreshParticipantStatistics(deps.db);
  const counts = { created: 0, updated: 0, unchanged: 0, failed: 0, skipped: 0, passed: 0 };
  const result: PreviewResult = {
    rows_read: 0, counts, rows: [], headers: [], ignored_columns: [], encoding: null, sheet: null, file_problem: null, whole_file: true,
  };
  const fieldsByName = new Map(domain.fields.map((f) => [f.name, f]));
  const privateFields = new Set(domain.fields.filter((f) => f.private).map((f) => f.name));
  const held = new Set<string>();
  const list = (row: PreviewRow) => {
    counts[row.outcome as keyof typeof counts]++;
    if (result.rows.length < limit) result.rows.push(row);
  };
  let table: Table | undefined;
  try {
    table = await openTable(open, job.file_format, deps.limits ?? DEFAULT_TABLE_LIMITS);
    Object.assign(result, { headers: table.headers, encoding: table.encoding ?? null, sheet: table.sheet ?? null });
    const mapping = matchHeaders(domain, table.headers,
      withReportColumnsIgnored(table.headers, job.column_map, new Set(domain.fields.map((f) => f.name))));
    result.ignored_columns = mapping.ignored;
    const coerce = createRowCoercer(deps.network, domain, mapping);
    const repeatsOf = createRepeatTracker(domain);
    const scope: PlanScope = { aggregatorId: job.aggregator_id, uploadId: job.upload_id, domain, mode: job.mode as PlanScope['mode'], mapped: mappedFields(mapping) };
    // Rows in file order, each planned (passed coercion) or settled (failed, repeated), a batch at a time.
    let batch: { rowNumber: number; keyed?: KeyedRow; holds?: ParticipantKeys; settled?: PreviewRow }[] = [];
    const planBatch = async () => {
      const planned = batch.filter((b) => b.keyed);
      const plans = await planRows(deps.db, deps.pii, scope, planned.map((b) => b.keyed!));
      if (job.sync) {
        // Failed and repeated rows still hold the participants their keys name.
        const holding = batch.filter((b) => b.holds);
        const found = await findMatches(deps.db, job.aggregator_id, domain, holding.map((b) => b.holds!));
        for (const stored of found) if (stored) held.add(stored.participant_id);
      }
      const planOf = new Map(planned.map((b, i) => [b, plans[i]]));
      for (const b of batch) {
        const plan = planOf.get(b);
        if (!plan) {
          list(b.settled!);
          continue;
        }
        if (plan.kind === 'update' || plan.kind === 'unchanged') held.add(plan.stored.participant_id);
        if (plan.kind === 'create') {
          const values = Object.fromEntries(Object.entries(b.keyed!.participant.profile).filter(([k]) => !privateFields.has(k)));
          list({ row_number: b.rowNumber, outcome: 'created', errors: [], values });
        } else if (plan.kind === 'unchanged') counts.unchanged++;
        else if (plan.kind === 'update') {
          list({
            row_number: b.rowNumber, outcome: 'updated', errors: [], participant_id: plan.stored.participant_id,
            changes: [...plan.changes.map((c) => ({ field: c.field, before: shownValue(fieldsByName.get(c.field), c.before), after: shownValue(fieldsByName.get(c.field), c.after) })),
              ...(plan.resume ? [{ field: 'lifecycle_status', before: 'paused', after: 'live' }] : [])],
          });
        } else list({ row_number: b.rowNumber, outcome: plan.kind, errors: plan.errors });
      }
      batch = [];
    };
    for await (const { rowNumber, values } of table.rows) {
      const outcome = coerce(values);
      const repeats = repeatsOf(outcome, rowNumber);
      const keysOf = (p: Parameters<typeof participantKeys>[1] | undefined) => (p ? participantKeys(deps.pii, p) : undefined);
      if (repeats) batch.push({ rowNumber, holds: keysOf(outcome.ok ? outcome.participant : undefined), settled: { row_number: rowNumber, outcome: 'skipped', errors: repeatReasons(repeats) } });
      else if (!outcome.ok) batch.push({ rowNumber, holds: keysOf(outcome.keys), settled: { row_number: rowNumber, outcome: 'failed', errors: outcome.errors } });
      else {
        const keys = participantKeys(deps.pii, outcome.participant);
        batch.push({ rowNumber, keyed: { participant: outcome.participant, keys, hash: contentHash(deps.pii, domain, outcome.participant.profile) } });
      }
      if (batch.length === PLAN_ROWS) await planBatch();
    }
    await planBatch();
  } catch (err) {
    if (!(err instanceof TableFormatError)) throw err;
    result.file_problem = err.message;
  } finally {
    table?.close();
  }
  counts.passed = counts.created + counts.updated + counts.unchanged;
  result.rows_read = counts.passed + counts.failed + counts.skipped;
  if (job.sync && !result.file_problem) {
    const ids = await participantsNotHeld(deps.db, job.aggregator_id, domain, held);
    result.pause = { count: ids.length, participants: await pausedParticipants(deps, domain, ids.slice(0, PAUSE_LISTED)) };
  }
  return result;
}

/** The participants `ids` as a sync dry run lists them (names masked). */
async function pausedParticipants(deps: { db: Queryable; pii: PiiCrypto }, domain: Domain, ids: string[]): Promise<PausedParticipant[]> {
  if (!ids.length) return [];
  const { rows } = await deps.db.query<{ participant_id: string; external_id: string | null; name_encrypted: string | null; lifecycle_status: string | null }>(
    `SELECT participant_id, external_id, name_encrypted, lifecycle_status FROM aggregator.participants
      WHERE participant_id = ANY($1::uuid[]) ORDER BY participant_id`, [ids]);
  const nameField = domain.fields.find((f) => f.identity === 'name');
  return rows.map((r) => ({
    participant_id: r.participant_id, external_id: r.external_id, lifecycle_status: r.lifecycle_status,
    name: r.name_encrypted ? shownValue(nameField, deps.pii.decrypt(r.name_encrypted)) : null,
  }));
}

const iso = (column: string) => `to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS ${column}`;
const COLUMNS = `preview_id, upload_id, status, rows AS rows_requested, result, result_sealed, ${iso('created_at')}, ${iso('completed_at')}`;

type PreviewRecord = Omit<PreviewJson, keyof PreviewResult> & { result: PreviewResult | null; result_sealed: string | null };

/** The API's view of a stored preview; a sealed result is decrypted here (`result` is that of a preview made before issue 15). */
function toJson(pii: PiiCrypto, row: PreviewRecord): PreviewJson {
  const { result, result_sealed: sealed, ...rest } = row;
  return { ...rest, ...(sealed ? openJson<PreviewResult>(pii, sealed) : result) };
}

/** Records a pending dry run of `uploadId` over `rows` rows and enqueues its task, in one transaction. */
export async function createPreview(pool: Pool, pii: PiiCrypto, uploadId: string, rows: number, createdBy: string): Promise<PreviewJson> {
  return withTransaction(pool, async (client) => {
    const previewId = randomUUID();
    const { rows: [row] } = await client.query(
      `INSERT INTO aggregator.bulk_upload_previews (preview_id, upload_id, rows, created_by) VALUES ($1, $2, $3, $4) RETURNING ${COLUMNS}`,
      [previewId, uploadId, rows, createdBy]);
    // Ahead of queued chunks: an operator is waiting for it.
    await enqueue(client, { task: PREVIEW_TASK, payload: { preview_id: previewId } satisfies PreviewPayload, jobKey: `${PREVIEW_TASK}:${previewId}`, priority: JOB_PRIORITY.awaited });
    return toJson(pii, row);
  });
}

/** Preview `previewId` of upload `uploadId`, or null; its result decrypted with `pii`. */
export async function getPreview(db: Queryable, pii: PiiCrypto, uploadId: string, previewId: string): Promise<PreviewJson | null> {
  const { rows } = await db.query<PreviewRecord>(`SELECT ${COLUMNS} FROM aggregator.bulk_upload_previews WHERE preview_id = $1 AND upload_id = $2`, [previewId, uploadId]);
  return rows[0] ? toJson(pii, rows[0]) : null;
}

/**
 * Records the result of a pending preview (a no-op when it is no longer pending), encrypted with
 * `pii`: it holds the rows' values and reasons that quote cells (PII at rest, issue 15).
 */
export async function completePreview(db: Queryable, pii: PiiCrypto, previewId: string, result: PreviewResult): Promise<void> {
  // The pause count in the clear too: the start of a sync job compares confirm_pause with it.
  await db.query(
    `UPDATE aggregator.bulk_upload_previews SET status = 'completed', result_sealed = $2, completed_at = now(), whole_file = $3, pause_count = $4
      WHERE preview_id = $1 AND status = 'pending'`, [previewId, sealJson(pii, result), result.whole_file ?? false, result.pause?.count ?? null]);
}
