/**
 * Dry runs of a bulk upload (issue 17, `POST /v1/bulk-uploads/{id}/preview`; table
 * aggregator.bulk_upload_previews): the first N data rows of the job's file go through the real
 * header matching, coercion and validation and the real duplicate rules (lib/aggregator/bulk/duplicates.ts:
 * repeats within those rows, keys already registered with the aggregator), and each gets the
 * outcome the real run would give — writing no participant and pushing nothing.
 *
 * One difference remains: the real run also fails a row that signals refuses (`invalid`,
 * `conflict`), which only the push can tell.
 */
import { randomUUID } from 'node:crypto';
import type { Readable } from 'node:stream';
import type { Pool, Queryable } from '../../platform/db.ts';
import { withTransaction } from '../../platform/db.ts';
import { enqueue } from '../../platform/jobs.ts';
import type { PiiCrypto } from '../../platform/crypto.ts';
import type { Domain, Network } from '../../network/config.ts';
import { findRegistered, participantKeys, type ParticipantKeys } from '../participants.ts';
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

export type PreviewOutcome = 'passed' | 'failed' | 'skipped';

export interface PreviewRow {
  row_number: number;
  outcome: PreviewOutcome;
  errors: FieldError[];
  /** For a passing row: the fields as they would be stored, private ones (phone, e-mail) left out. */
  values?: Record<string, unknown>;
}

/** What a dry run found (stored as the preview's `result`). */
export interface PreviewResult {
  rows_read: number;
  /** Would-be counts over the rows read. */
  counts: Record<PreviewOutcome, number>;
  rows: PreviewRow[];
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
  for (const row of result.rows) result.counts[row.outcome]++;
  return result;
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
    // Ahead of queued chunks (lower runs first): an operator is waiting for it.
    await enqueue(client, { task: PREVIEW_TASK, payload: { preview_id: previewId } satisfies PreviewPayload, jobKey: `${PREVIEW_TASK}:${previewId}`, priority: -10 });
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
  await db.query(
    `UPDATE aggregator.bulk_upload_previews SET status = 'completed', result_sealed = $2, completed_at = now()
      WHERE preview_id = $1 AND status = 'pending'`, [previewId, sealJson(pii, result)]);
}
