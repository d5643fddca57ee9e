/**
 * Bulk-upload jobs (spec "Bulk-upload job"; table aggregator.bulk_uploads): creating, reading,
 * starting and ending them, shared by the aggregator API and the bulk-upload tasks.
 *
 * Statuses: pending → running (POST …/start, attested) → completed | failed. `running` and
 * `completed` answer a repeated start unchanged; `failed` (a file-level problem) is final.
 */
import type { Pool, PoolClient, Queryable } from '../../platform/db.ts';
import { withTransaction } from '../../platform/db.ts';
import { enqueue } from '../../platform/jobs.ts';
import type { Metrics } from '../../platform/metrics.ts';
import type { Domain } from '../../network/config.ts';
import type { Mapping } from './mapping.ts';
import type { TableFormat } from './table.ts';
import type { UploadMode } from './upsert.ts';

export const BULK_UPLOAD_STATUSES = ['pending', 'running', 'completed', 'failed'] as const;
export type BulkUploadStatus = (typeof BULK_UPLOAD_STATUSES)[number];

/** Task identifiers (tasks/bulk-upload-*.ts). */
export const STAGE_TASK = 'bulk-upload-stage';
export const CHUNK_TASK = 'bulk-upload-chunk';
export const FINISH_TASK = 'bulk-upload-finish';

/** Payload of STAGE_TASK and FINISH_TASK. */
export interface UploadPayload {
  upload_id: string;
}

/** Payload of CHUNK_TASK. */
export interface ChunkPayload {
  upload_id: string;
  chunk_index: number;
}

/** A job as the API returns it: the spec's fields plus ours (file, attestation, progress). */
export interface BulkUploadJson {
  upload_id: string;
  status: BulkUploadStatus;
  status_reason: string | null;
  participant_type: string;
  total_rows: number | null;
  passed: number;
  failed: number;
  skipped: number;
  errors_csv_object_key: string | null;
  schema_id: string;
  schema_version: string;
  created_at: string;
  completed_at: string | null;
  file_name: string | null;
  file_format: TableFormat;
  file_size_bytes: number;
  column_map: Mapping | null;
  /** The saved mapping the job was created with (its column_map is that version's mapping). */
  mapping_id: string | null;
  mapping_version: number | null;
  created_by: string;
  attested_by: string | null;
  attested_at: string | null;
  started_at: string | null;
  encoding: string | null;
  sheet: string | null;
  /** Rows with an outcome so far (passed + failed + skipped). */
  processed_rows: number;
  updated_at: string;
  /** When the file, error report and error rows were deleted, BULK_RETENTION_DAYS after completion (issue 15). */
  purged_at: string | null;
  /** create (new participants only), upsert (create or update) or update (existing only): issue 30. */
  mode: UploadMode;
  /** With upsert: the file is the whole list; participants it no longer holds are paused once the job completes. */
  sync: boolean;
  /** passed = created + updated + unchanged. */
  created: number;
  updated: number;
  unchanged: number;
  /** Sync: the pause count the operator confirmed at start (from the dry run). */
  confirm_pause: number | null;
  allow_large_pause: boolean;
  /** Sync: participants the file no longer holds, found when it was staged; null before. */
  to_pause: number | null;
  /** Sync: participants paused so far. */
  paused: number;
}

/** The job as stored, for the tasks. */
export interface BulkUploadRecord extends BulkUploadJson {
  aggregator_id: string;
  org_id: string;
  file_object_key: string;
  headers: string[] | null;
  staged_at: string | null;
  chunk_count: number | null;
  chunks_done: number;
}

const iso = (column: string) => `to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS ${column}`;

const JSON_COLUMNS = `upload_id, status, status_reason, participant_type, total_rows, passed, failed, skipped,
  errors_csv_object_key, schema_id, schema_version, ${iso('created_at')}, ${iso('completed_at')}, file_name, file_format,
  file_size_bytes, column_map, mapping_id, mapping_version, created_by, attested_by, ${iso('attested_at')}, ${iso('started_at')}, encoding, sheet,
  passed + failed + skipped AS processed_rows, ${iso('updated_at')}, ${iso('purged_at')}, mode, sync, created, updated, unchanged,
  confirm_pause, allow_large_pause, to_pause, paused`;

const RECORD_COLUMNS = `${JSON_COLUMNS}, aggregator_id, org_id, file_object_key, headers, ${iso('staged_at')}, chunk_count, chunks_done`;

function toJson(record: BulkUploadRecord): BulkUploadJson {
  const { aggregator_id: _a, org_id: _o, file_object_key: _k, headers: _h, staged_at: _s, chunk_count: _c, chunks_done: _d, ...json } = record;
  return json;
}

/** Object key of an upload's stored file (its format is recorded in the job, from its content). */
export function sourceObjectKey(aggregatorId: string, uploadId: string): string {
  return `bulk-uploads/${aggregatorId}/${uploadId}/source`;
}

/** Object key of an upload's error report. */
export function errorReportObjectKey(aggregatorId: string, uploadId: string): string {
  return `bulk-uploads/${aggregatorId}/${uploadId}/errors.csv`;
}

/** Records a new pending job for a file already stored under `fileObjectKey`. */
export async function createBulkUpload(db: Queryable, input: {
  uploadId: string;
  aggregatorId: string;
  orgId: string;
  domain: Domain;
  createdBy: string;
  fileName: string | null;
  format: TableFormat;
  sizeBytes: number;
  fileObjectKey: string;
  columnMap: Mapping | null;
  mapping?: { id: string; version: number };
  mode?: UploadMode;
  sync?: boolean;
}): Promise<BulkUploadJson> {
  const { rows } = await db.query<BulkUploadRecord>(
    `INSERT INTO aggregator.bulk_uploads (upload_id, aggregator_id, org_id, participant_type, schema_id, schema_version,
       file_name, file_format, file_size_bytes, file_object_key, column_map, created_by, mapping_id, mapping_version, mode, sync)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
     RETURNING ${RECORD_COLUMNS}`,
    [input.uploadId, input.aggregatorId, input.orgId, input.domain.name, input.domain.schemaId, input.domain.schemaVersion,
      input.fileName, input.format, input.sizeBytes, input.fileObjectKey,
      input.columnMap === null ? null : JSON.stringify(input.columnMap), input.createdBy,
      input.mapping?.id ?? null, input.mapping?.version ?? null, input.mode ?? 'create', input.sync ?? false]);
  return toJson(rows[0]);
}

/** The job `uploadId` of `aggregatorId` (as the API shows it), or null. */
export async function getBulkUpload(db: Queryable, aggregatorId: string, uploadId: string): Promise<BulkUploadJson | null> {
  const { rows } = await db.query<BulkUploadRecord>(
    `SELECT ${RECORD_COLUMNS} FROM aggregator.bulk_uploads WHERE upload_id = $1 AND aggregator_id = $2`, [uploadId, aggregatorId]);
  return rows[0] ? toJson(rows[0]) : null;
}

/** The full record of job `uploadId` (for tasks); `forUpdate` locks it in the caller's transaction. */
export async function loadBulkUpload(db: Queryable, uploadId: string, forUpdate = false): Promise<BulkUploadRecord | null> {
  const { rows } = await db.query<BulkUploadRecord>(
    `SELECT ${RECORD_COLUMNS} FROM aggregator.bulk_uploads WHERE upload_id = $1${forUpdate ? ' FOR UPDATE' : ''}`, [uploadId]);
  return rows[0] ?? null;
}

/** One page of the jobs of `aggregatorId`, newest first, and how many there are in all. */
export async function listBulkUploads(db: Queryable, aggregatorId: string, page: { page: number; limit: number }): Promise<{ jobs: BulkUploadJson[]; total: number }> {
  const [{ rows }, { rows: [count] }] = await Promise.all([
    db.query<BulkUploadRecord>(
      // Qualified: the output created_at is text; the column's order is bulk_uploads_aggregator_idx's.
      `SELECT ${RECORD_COLUMNS} FROM aggregator.bulk_uploads AS b WHERE aggregator_id = $1
        ORDER BY b.created_at DESC, b.upload_id DESC LIMIT $2 OFFSET $3`,
      [aggregatorId, page.limit, (page.page - 1) * page.limit]),
    db.query<{ total: number }>('SELECT count(*) AS total FROM aggregator.bulk_uploads WHERE aggregator_id = $1', [aggregatorId]),
  ]);
  return { jobs: rows.map(toJson), total: count.total };
}

export type StartOutcome =
  | { outcome: 'started' | 'unchanged'; job: BulkUploadJson }
  | { outcome: 'failed'; job: BulkUploadJson }
  | { outcome: 'not_found' }
  /** Sync guard (issue 30): no confirm_pause given, no whole-file dry run yet, another count, or a large pause not allowed. */
  | { outcome: 'confirm_pause_required' | 'dry_run_required' }
  | { outcome: 'pause_mismatch' | 'large_pause'; pauseCount: number; participants: number };

/** The sync guard's inputs at start: the count the operator confirms and the share of the domain beyond which a pause needs allow_large_pause. */
export interface PauseConfirmation {
  confirmPause?: number;
  allowLargePause?: boolean;
  /** BULK_SYNC_MAX_PAUSE_FRACTION. */
  maxPauseFraction: number;
}

/**
 * Moves a pending job of `aggregatorId` to running, recording the attestation (`attestedBy`, now),
 * and enqueues its staging task in the same transaction. A running or completed job is returned
 * unchanged (spec: idempotent); a failed one is reported as such.
 *
 * A sync job (issue 30) starts only after a dry run of the whole file, with `confirmPause` equal
 * to the count to pause that dry run reported; a count above `maxPauseFraction` of the
 * aggregator's live and draft participants of the domain also needs `allowLargePause`.
 */
export async function startBulkUpload(pool: Pool, aggregatorId: string, uploadId: string, attestedBy: string,
  pause: PauseConfirmation = { maxPauseFraction: 0.2 }): Promise<StartOutcome> {
  return withTransaction(pool, async (client) => {
    const { rows: [pending] } = await client.query<{ sync: boolean; participant_type: string }>(
      `SELECT sync, participant_type FROM aggregator.bulk_uploads WHERE upload_id = $1 AND aggregator_id = $2 AND status = 'pending' FOR UPDATE`,
      [uploadId, aggregatorId]);
    if (pending?.sync) {
      if (pause.confirmPause === undefined) return { outcome: 'confirm_pause_required' };
      const { rows: [dryRun] } = await client.query<{ pause_count: number }>(
        `SELECT pause_count FROM aggregator.bulk_upload_previews
          WHERE upload_id = $1 AND status = 'completed' AND whole_file AND pause_count IS NOT NULL ORDER BY completed_at DESC LIMIT 1`, [uploadId]);
      if (!dryRun) return { outcome: 'dry_run_required' };
      const { rows: [{ participants }] } = await client.query<{ participants: number }>(
        `SELECT count(*)::int AS participants FROM aggregator.participants
          WHERE aggregator_id = $1 AND domain = $2 AND lifecycle_status IN ('live', 'draft')`, [aggregatorId, pending.participant_type]);
      if (dryRun.pause_count !== pause.confirmPause) return { outcome: 'pause_mismatch', pauseCount: dryRun.pause_count, participants };
      if (dryRun.pause_count > pause.maxPauseFraction * participants && !pause.allowLargePause) {
        return { outcome: 'large_pause', pauseCount: dryRun.pause_count, participants };
      }
    }
    const { rows } = await client.query<BulkUploadRecord>(
      `UPDATE aggregator.bulk_uploads
          SET status = 'running', attested_by = $3, attested_at = now(), started_at = now(), updated_at = now(),
              confirm_pause = CASE WHEN sync THEN $4::int END, allow_large_pause = sync AND $5
        WHERE upload_id = $1 AND aggregator_id = $2 AND status = 'pending'
        RETURNING ${RECORD_COLUMNS}`, [uploadId, aggregatorId, attestedBy, pause.confirmPause ?? null, pause.allowLargePause ?? false]);
    if (rows[0]) {
      await enqueue(client, { task: STAGE_TASK, payload: { upload_id: uploadId } satisfies UploadPayload, jobKey: `${STAGE_TASK}:${uploadId}` });
      return { outcome: 'started', job: toJson(rows[0]) };
    }
    const job = await getBulkUpload(client, aggregatorId, uploadId);
    if (!job) return { outcome: 'not_found' };
    return { outcome: job.status === 'failed' ? 'failed' : 'unchanged', job };
  });
}

/**
 * Ends a running job as failed with `reason` (a file-level problem, shown to the operator).
 * Nothing has been onboarded at that point: staging reads the whole file before any row is.
 */
export async function failBulkUpload(client: PoolClient | Pool, uploadId: string, reason: string): Promise<void> {
  await client.query(
    `UPDATE aggregator.bulk_uploads SET status = 'failed', status_reason = $2, completed_at = now(), updated_at = now()
      WHERE upload_id = $1 AND status = 'running'`, [uploadId, reason.slice(0, 2000)]);
}

/**
 * `bulk_upload_rows{outcome}`: rows of every bulk upload so far by outcome (passed, failed,
 * skipped), read from the jobs' O(1) counters at each scrape (lib/platform/metrics.ts).
 */
export function registerBulkUploadMetrics(metrics: Metrics, db: Queryable): void {
  metrics.gauge('bulk_upload_rows', 'Bulk-upload rows processed so far, by outcome.', ['outcome'], async () => {
    const { rows: [sum] } = await db.query<{ passed: string; failed: string; skipped: string }>(
      'SELECT coalesce(sum(passed), 0) AS passed, coalesce(sum(failed), 0) AS failed, coalesce(sum(skipped), 0) AS skipped FROM aggregator.bulk_uploads');
    return (['passed', 'failed', 'skipped'] as const).map((outcome) => ({ labels: { outcome }, value: Number(sum[outcome]) }));
  });
}
