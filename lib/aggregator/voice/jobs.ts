/**
 * Voice jobs (spec "Voice job"; tables aggregator.voice_jobs, voice_job_items,
 * voice_idempotency_keys): creating them (with their Idempotency-Key), reading them with their O(1)
 * counters and a page of items, listing them; the derived job status.
 *
 * Item statuses: pending → resolved | skipped_not_owned | skipped_no_contact | duplicate_active;
 * resolved → submitted → sent | failed (a callback may also move resolved straight to sent or
 * failed when it overtakes the recording of the submission). sent, failed and the skips are
 * terminal. Job status (docs/decisions.md "Voice campaigns"): see {@link deriveStatus}.
 */
import { createHash } from 'node:crypto';
import type { Pool, Queryable } from '../../platform/db.ts';
import { withTransaction } from '../../platform/db.ts';
import { enqueueMany } from '../../platform/jobs.ts';

export const VOICE_CHANNELS = ['voice', 'export'] as const;
export type VoiceChannel = (typeof VOICE_CHANNELS)[number];

export const COUNT_NAMES = [
  'total', 'pending', 'resolved', 'submitted', 'sent', 'skipped_not_owned', 'skipped_no_contact', 'duplicate_active', 'failed',
] as const;
export type VoiceCounts = Record<(typeof COUNT_NAMES)[number], number>;
export type ItemStatus = Exclude<(typeof COUNT_NAMES)[number], 'total'>;

export type VoiceJobStatus = 'queued' | 'processing' | 'completed' | 'partial' | 'failed';

/** Task identifiers (tasks/voice-*.ts). */
export const DISPATCH_TASK = 'voice-dispatch-chunk';
export const EXPORT_TASK = 'voice-export';

/** Payload of DISPATCH_TASK: the items with `first_seq <= seq <= last_seq`. */
export interface DispatchPayload {
  job_id: string;
  first_seq: number;
  last_seq: number;
}

/** Payload of EXPORT_TASK. */
export interface ExportPayload {
  job_id: string;
}

export interface VoiceContent {
  script?: string;
  audio_url?: string;
}

export interface MetadataEntry {
  key: string;
  value: string;
}

/** A job as stored. */
export interface VoiceJobRecord extends VoiceCounts {
  job_id: string;
  aggregator_id: string;
  org_id: string;
  channel: VoiceChannel;
  content: VoiceContent;
  metadata: MetadataEntry[];
  schedule_at: string | null;
  created_by: string;
  provider_response: unknown;
  export_object_key: string | null;
  /** When task voice-export-retention deleted the export's CSV (VOICE_EXPORT_RETENTION_DAYS after it was written). */
  export_purged_at: string | null;
  version: string;
  created_at: string;
  updated_at: string;
}

/** An item as the API shows it: all strings (spec), "" where there is no value. */
export interface VoiceItemJson {
  item_id: string;
  status: ItemStatus;
  provider_ref: string;
  provider_batch_ref: string;
  skip_reason: string;
  error_reason: string;
}

/** A job as the API shows it (spec fields, then ours). */
export interface VoiceJobJson {
  job_id: string;
  channel: VoiceChannel;
  status: VoiceJobStatus;
  counts: VoiceCounts;
  created_at: string;
  updated_at: string;
  metadata: MetadataEntry[];
  provider_response: unknown;
  content: VoiceContent;
  schedule_at: string | null;
  export_object_key: string | null;
}

const iso = (column: string) => `to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS ${column}`;
const COLUMNS = `job_id, aggregator_id, org_id, channel, content, metadata, ${iso('schedule_at')}, created_by, ${COUNT_NAMES.join(', ')},
  provider_response, export_object_key, ${iso('export_purged_at')}, version::text AS version, ${iso('created_at')}, ${iso('updated_at')}`;

/**
 * The job status derived from its counters (docs/decisions.md "Voice campaigns"):
 * - `queued`: no item handled yet (every item pending);
 * - `processing`: some item is not final yet (pending, resolved or submitted; for an export, also
 *   while the CSV is being written);
 * - `completed`: every item delivered (voice: `sent`; export: `resolved`, i.e. in the CSV);
 * - `partial`: all final, some delivered and some not (skipped, duplicate or failed);
 * - `failed`: all final, none delivered.
 */
export function deriveStatus(channel: VoiceChannel, c: VoiceCounts, exportWritten: boolean): VoiceJobStatus {
  if (c.pending === c.total && c.total > 0) return 'queued';
  const delivered = channel === 'voice' ? c.sent : c.resolved;
  const open = channel === 'voice' ? c.pending + c.resolved + c.submitted : c.pending;
  if (open > 0 || (channel === 'export' && !exportWritten)) return 'processing';
  if (delivered === c.total) return 'completed';
  return delivered > 0 ? 'partial' : 'failed';
}

export function countsOf(record: VoiceCounts): VoiceCounts {
  return Object.fromEntries(COUNT_NAMES.map((n) => [n, record[n]])) as VoiceCounts;
}

/** The API form of `record`. */
export function toJobJson(record: VoiceJobRecord): VoiceJobJson {
  const counts = countsOf(record);
  return {
    job_id: record.job_id, channel: record.channel, status: deriveStatus(record.channel, counts, record.export_object_key !== null),
    counts, created_at: record.created_at, updated_at: record.updated_at, metadata: record.metadata,
    provider_response: record.provider_response ?? null, content: record.content, schedule_at: record.schedule_at,
    export_object_key: record.export_object_key,
  };
}

/** The job `jobId` as stored, or null. */
export async function loadVoiceJob(db: Queryable, jobId: string): Promise<VoiceJobRecord | null> {
  const { rows } = await db.query<VoiceJobRecord>(`SELECT ${COLUMNS} FROM aggregator.voice_jobs WHERE job_id = $1`, [jobId]);
  return rows[0] ?? null;
}

export interface CreateVoiceJobInput {
  jobId: string;
  aggregatorId: string;
  orgId: string;
  createdBy: string;
  channel: VoiceChannel;
  content: VoiceContent;
  metadata: MetadataEntry[];
  scheduleAt: string | null;
  /** Distinct item ids, in the order given. */
  itemIds: string[];
  idempotencyKey: string;
  /** SHA-256 of the request as validated ({@link requestHash}). */
  requestHash: string;
  /** Items per dispatch chunk job (VOICE_CHUNK_ITEMS). */
  chunkItems: number;
}

export type CreateOutcome =
  | { outcome: 'created' | 'replayed'; job: VoiceJobRecord }
  | { outcome: 'conflict'; jobId: string };

/** SHA-256 (hex) of a validated request, as stored with its Idempotency-Key. */
export function requestHash(validated: unknown): string {
  return createHash('sha256').update(JSON.stringify(validated)).digest('hex');
}

/**
 * Creates a job with all its items pending and enqueues its dispatch chunks, in one transaction,
 * unless `idempotencyKey` was used before by the same aggregator: then answers the job it created
 * (same request hash) or a conflict (another one). Concurrent requests with one key wait on the
 * key's unique index; exactly one creates the job.
 */
export async function createVoiceJob(pool: Pool, input: CreateVoiceJobInput): Promise<CreateOutcome> {
  return withTransaction(pool, async (client) => {
    const { rows: claimed } = await client.query(
      `INSERT INTO aggregator.voice_idempotency_keys (aggregator_id, idempotency_key, request_hash, job_id)
       VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING RETURNING job_id`,
      [input.aggregatorId, input.idempotencyKey, input.requestHash, input.jobId]);
    if (claimed.length === 0) {
      const { rows: [seen] } = await client.query<{ request_hash: string; job_id: string }>(
        'SELECT request_hash, job_id FROM aggregator.voice_idempotency_keys WHERE aggregator_id = $1 AND idempotency_key = $2',
        [input.aggregatorId, input.idempotencyKey]);
      if (seen.request_hash !== input.requestHash) return { outcome: 'conflict', jobId: seen.job_id };
      return { outcome: 'replayed', job: (await loadVoiceJob(client, seen.job_id))! };
    }
    const total = input.itemIds.length;
    await client.query(
      `INSERT INTO aggregator.voice_jobs (job_id, aggregator_id, org_id, channel, content, metadata, schedule_at, created_by, total, pending)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9)`,
      [input.jobId, input.aggregatorId, input.orgId, input.channel, JSON.stringify(input.content), JSON.stringify(input.metadata),
        input.scheduleAt, input.createdBy, total]);
    await client.query(
      `INSERT INTO aggregator.voice_job_items (job_id, item_id, seq)
       SELECT $1, x.id, (x.ord - 1)::int FROM unnest($2::uuid[]) WITH ORDINALITY AS x(id, ord)`,
      [input.jobId, input.itemIds]);
    const chunks = [];
    for (let first = 0; first < total; first += input.chunkItems) {
      const payload: DispatchPayload = { job_id: input.jobId, first_seq: first, last_seq: Math.min(first + input.chunkItems, total) - 1 };
      chunks.push({
        task: DISPATCH_TASK, payload, jobKey: `${DISPATCH_TASK}:${input.jobId}:${first}`,
        runAt: input.scheduleAt ? new Date(input.scheduleAt) : undefined,
      });
    }
    await enqueueMany(client, chunks);
    return { outcome: 'created', job: (await loadVoiceJob(client, input.jobId))! };
  });
}

/** When the poll statement builds the job and its page: the caller's voice job at a version it does not have. */
const POLL_WANTS_PAGE = `j.org_id = $2 AND j.channel = 'voice' AND NOT (j.version::text = ANY($5::text[]))`;

export interface PolledJob {
  org_id: string;
  channel: VoiceChannel;
  version: string;
  /**
   * The job as stored and one page of its items; null when the job is not a voice job of the
   * caller's organisation, or is at a version the caller has.
   */
  page: { job: VoiceJobRecord; items: VoiceItemJson[]; nextSeq: number | null } | null;
}

/**
 * A job's organisation, channel and version and, in the same statement (one round trip, one
 * snapshot), the job and one page of its items — only when it is a voice job of organisation
 * `orgId` whose version is not among `knownVersions` (the caller's If-None-Match, or the version of
 * an answer the caller holds), so an unchanged job costs an index lookup of its row and three
 * columns. Page: items after position `afterSeq`, at most `limit`, in order. Item positions are
 * dense (0..total-1), so a page is a range of the (job_id, seq) index: its cost does not depend on
 * the job's size, nor on the planner's statistics of a freshly written job.
 */
export async function pollVoiceJob(db: Queryable, jobId: string, options: { orgId: string; afterSeq: number; limit: number; knownVersions: string[] }): Promise<PolledJob | null> {
  // A named (prepared) statement: pollers send it hundreds of times a second, so each connection
  // parses and plans it once.
  const { rows } = await db.query<{ org_id: string; channel: VoiceChannel; version: string; job: VoiceJobRecord | null; items: (VoiceItemJson & { seq: number })[] | null }>({
    name: 'voice-job-poll',
    // CASE, not a lateral join's WHERE: the planner would turn that into a join filter and build the page anyway.
    text: `SELECT j.org_id, j.channel, j.version::text AS version,
         CASE WHEN ${POLL_WANTS_PAGE} THEN (SELECT row_to_json(r) FROM (SELECT ${COLUMNS}) r) END AS job,
         CASE WHEN ${POLL_WANTS_PAGE} THEN coalesce((
           SELECT json_agg(json_build_object('item_id', i.item_id, 'status', i.status, 'provider_ref', coalesce(i.provider_ref, ''),
                    'provider_batch_ref', coalesce(i.provider_batch_ref, ''), 'skip_reason', coalesce(i.skip_reason, ''),
                    'error_reason', coalesce(i.error_reason, ''), 'seq', i.seq) ORDER BY i.seq)
             FROM aggregator.voice_job_items i WHERE i.job_id = j.job_id AND i.seq > $3 AND i.seq <= $3 + $4), '[]') END AS items
       FROM aggregator.voice_jobs j WHERE j.job_id = $1`,
    values: [jobId, options.orgId, options.afterSeq, options.limit + 1, options.knownVersions],
  });
  const row = rows[0];
  if (!row) return null;
  const { job, items, ...head } = row;
  if (!job || !items) return { ...head, page: null };
  const more = items.length > options.limit;
  const page = items.slice(0, options.limit);
  return { ...head, page: { job, items: page.map(({ seq: _s, ...item }) => item), nextSeq: more ? page[page.length - 1].seq : null } };
}

/** One page of the jobs of organisation `orgId` (both channels), newest first, and how many there are. */
export async function listVoiceJobs(db: Queryable, orgId: string, page: { page: number; limit: number }): Promise<{ jobs: VoiceJobJson[]; total: number }> {
  const [{ rows }, { rows: [count] }] = await Promise.all([
    db.query<VoiceJobRecord>(
      // Qualified: the output created_at is text; the column's order is voice_jobs_org_idx's.
      `SELECT ${COLUMNS} FROM aggregator.voice_jobs AS j WHERE org_id = $1 ORDER BY j.created_at DESC, j.job_id DESC LIMIT $2 OFFSET $3`,
      [orgId, page.limit, (page.page - 1) * page.limit]),
    db.query<{ total: number }>('SELECT count(*)::int AS total FROM aggregator.voice_jobs WHERE org_id = $1', [orgId]),
  ]);
  return { jobs: rows.map(toJobJson), total: count.total };
}
