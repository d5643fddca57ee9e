/**
 * The moves of voice-job items (see jobs.ts for the statuses), each in one transaction that also
 * moves the job's counters by the same amounts, so the counters always equal the item rows.
 * Each UPDATE names the status it moves from in its WHERE clause, which PostgreSQL re-checks on
 * the latest row version when a concurrent move got there first (READ COMMITTED), so the counted
 * moves are exactly the ones made — without locking rows beforehand (each such lock is a write).
 * Inputs are sorted by item id, so concurrent moves of the same items lock them in one order. */
import type { Logger } from '../../platform/logger.ts';
import type { Pool, PoolClient, Queryable } from '../../platform/db.ts';
import { withTransaction } from '../../platform/db.ts';
import { enqueue } from '../../platform/jobs.ts';
import { EXPORT_TASK, type ExportPayload, type ItemStatus, type VoiceChannel, type VoiceJobRecord } from './jobs.ts';
import { parseCallKey, type CallbackUpdate, type ProviderCallAnswer } from './protocol.ts';

/** Why an item was skipped (its skip_reason), per channel. */
export const SKIP_REASONS: Record<VoiceChannel, Partial<Record<ItemStatus, string>>> = {
  voice: {
    skipped_not_owned: 'not a participant of your organisation',
    skipped_no_contact: 'the participant has no phone number',
    duplicate_active: 'the participant is already in another active voice job of your organisation',
  },
  export: {
    skipped_not_owned: 'not a participant of your aggregator',
    skipped_no_contact: 'the participant has no phone number',
  },
};

type Delta = Partial<Record<ItemStatus, number>>;

/**
 * The rows of job $1 named by the item ids in $2: a lookup in the primary key whatever the
 * statistics say. Their new values come from $3, `valuesByItem`'s JSON object keyed by item id.
 */
const BY_ITEM = 'i.job_id = $1 AND i.item_id = ANY($2::uuid[])';

/**
 * The new value `field` of row `i`, from the object $3 (a jsonb parameter, converted once per
 * statement; a jsonb object's keys are sorted, so each lookup is a binary search). Not
 * `array_position` in parallel arrays — O(n) per row, so a 1,000-item batch cost O(n²) — nor a join
 * to `unnest(...)`: on stale statistics the planner nested it inside the item scan, O(n²) again.
 */
const value = (field: string) => `($3::jsonb -> i.item_id::text ->> '${field}')`;

/** `{<item_id>: {field: value}}` of `rows` for `value` (item ids as PostgreSQL prints a uuid: lower case). */
function valuesByItem<T extends { item_id: string }>(rows: T[], fields: (keyof T & string)[]): string {
  return JSON.stringify(Object.fromEntries(rows.map((row) => [row.item_id.toLowerCase(), Object.fromEntries(fields.map((f) => [f, row[f] ?? null]))])));
}

/**
 * Adds `delta` to the job's counters (and bumps its version) in the caller's transaction.
 * @returns the counters' new pending value.
 */
async function moveCounters(client: PoolClient, jobId: string, delta: Delta): Promise<{ pending: number }> {
  const entries = Object.entries(delta).filter(([, n]) => n !== 0);
  const sets = entries.map(([name], i) => `${name} = ${name} + $${i + 2}`);
  const { rows: [job] } = await client.query<{ pending: number }>(
    `UPDATE aggregator.voice_jobs SET ${[...sets, 'version = version + 1', 'updated_at = now()'].join(', ')}
      WHERE job_id = $1 RETURNING pending`, [jobId, ...entries.map(([, n]) => n)]);
  return job;
}

/** Sums moves `{old, new, n}` into counter deltas. */
function deltaOf(moves: { old: ItemStatus; new: ItemStatus; n: number }[]): Delta {
  const delta: Delta = {};
  for (const m of moves) {
    delta[m.old] = (delta[m.old] ?? 0) - m.n;
    delta[m.new] = (delta[m.new] ?? 0) + m.n;
  }
  return delta;
}

/**
 * Resolves the pending items of `job` with `firstSeq <= seq <= lastSeq`: `skipped_not_owned` when
 * the item is not a participant of the job's organisation — for an export job, of the job's
 * aggregator: the CSV discloses contacts, which only their aggregator may read, as the profile
 * export (docs/decisions.md "Trust II") — `skipped_no_contact` when it has no
 * phone, `duplicate_active` (voice channel) when another voice job of the organisation has it
 * resolved or submitted, else `resolved`. Resolutions of one organisation are serialised (an
 * advisory lock), so two jobs never both take the same participant. When the last pending item of
 * an export job is resolved, the export task is enqueued in the same transaction.
 * @returns how many items moved to each status.
 */
export async function resolveItems(pool: Pool, job: VoiceJobRecord, firstSeq: number, lastSeq: number): Promise<Delta> {
  return withTransaction(pool, async (client) => {
    await client.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', [`voice-resolve:${job.org_id}`]);
    const { rows } = await client.query<{ status: ItemStatus; n: number }>(
      `WITH chunk AS (
         SELECT i.item_id, p.org_id AS owner_org, p.aggregator_id AS owner_aggregator, p.phone_encrypted IS NOT NULL AS has_phone
           FROM aggregator.voice_job_items i LEFT JOIN aggregator.participants p ON p.participant_id = i.item_id
          WHERE i.job_id = $1 AND i.seq BETWEEN $2 AND $3 AND i.status = 'pending'),
       decided AS (
         SELECT c.item_id, CASE
             WHEN c.owner_org IS DISTINCT FROM $4::uuid THEN 'skipped_not_owned'
             WHEN $5 = 'export' AND c.owner_aggregator IS DISTINCT FROM $7::uuid THEN 'skipped_not_owned'
             WHEN NOT c.has_phone THEN 'skipped_no_contact'
             WHEN $5 = 'voice' AND EXISTS (
               SELECT 1 FROM aggregator.voice_job_items o JOIN aggregator.voice_jobs j ON j.job_id = o.job_id
                WHERE o.item_id = c.item_id AND o.status IN ('resolved', 'submitted') AND o.job_id <> $1
                  AND j.org_id = $4::uuid AND j.channel = 'voice') THEN 'duplicate_active'
             ELSE 'resolved' END AS status
           FROM chunk c),
       moved AS (
         UPDATE aggregator.voice_job_items i
            SET status = d.status, skip_reason = ($6::jsonb ->> d.status), updated_at = now()
           FROM decided d WHERE i.job_id = $1 AND i.seq BETWEEN $2 AND $3 AND i.item_id = d.item_id AND i.status = 'pending'
         RETURNING d.status)
       SELECT status, count(*)::int AS n FROM moved GROUP BY status`,
      [job.job_id, firstSeq, lastSeq, job.org_id, job.channel, JSON.stringify(SKIP_REASONS[job.channel]), job.aggregator_id]);
    const delta = deltaOf(rows.map((r) => ({ old: 'pending', new: r.status, n: r.n })));
    if (rows.length === 0) return {};
    const { pending } = await moveCounters(client, job.job_id, delta);
    if (pending === 0 && job.channel === 'export') {
      await enqueue(client, { task: EXPORT_TASK, payload: { job_id: job.job_id } satisfies ExportPayload, jobKey: `${EXPORT_TASK}:${job.job_id}` });
    }
    return delta;
  });
}

/**
 * Refreshes the planner statistics of voice_job_items (ANALYZE) when they predate a job of `total`
 * items (never gathered, or the table was estimated smaller than this one job): the item moves look
 * items up by id among many, which the planner sees as selective only once it knows item ids are
 * (nearly) unique. Autovacuum keeps them fresh afterwards.
 */
export async function refreshItemStatistics(db: Queryable, total: number): Promise<void> {
  const { rows: [table] } = await db.query<{ reltuples: number }>(
    `SELECT reltuples::float8 AS reltuples FROM pg_class WHERE oid = 'aggregator.voice_job_items'::regclass`);
  if (table.reltuples < total) await db.query('ANALYZE aggregator.voice_job_items');
}

/** A resolved item not yet submitted, with its encrypted phone. */
export interface SubmittableItem {
  item_id: string;
  phone_encrypted: string;
}

/** The resolved items of `jobId` with `firstSeq <= seq <= lastSeq` that have no provider ref yet, in order. */
export async function submittableItems(db: Queryable, jobId: string, firstSeq: number, lastSeq: number): Promise<SubmittableItem[]> {
  const { rows } = await db.query<SubmittableItem>(
    `SELECT i.item_id, p.phone_encrypted
       FROM aggregator.voice_job_items i JOIN aggregator.participants p ON p.participant_id = i.item_id
      WHERE i.job_id = $1 AND i.seq BETWEEN $2 AND $3 AND i.status = 'resolved' AND i.provider_ref IS NULL
      ORDER BY i.seq`, [jobId, firstSeq, lastSeq]);
  return rows;
}

/**
 * Records what the provider answered for submitted items of `jobId`: `resolved` → `submitted` with
 * provider_ref and provider_batch_ref; an item a callback already moved on keeps its status and only
 * gains the refs it lacks. `failures` (items that could not be submitted at all, e.g. an
 * undecryptable phone) move `resolved` → `failed` with their reason. Also records the batch
 * (`batchRef`, as the provider answered it) in the job's provider_response.
 */
export async function recordSubmitted(pool: Pool, jobId: string, batchRef: string | null, calls: (ProviderCallAnswer & { item_id: string })[],
  failures: { item_id: string; error_reason: string }[] = []): Promise<void> {
  if (calls.length === 0 && failures.length === 0) return;
  const byItem = (a: { item_id: string }, b: { item_id: string }) => (a.item_id < b.item_id ? -1 : 1);
  const sorted = [...calls].sort(byItem);
  const ids = sorted.map((c) => c.item_id);
  await withTransaction(pool, async (client) => {
    const { rowCount: moved } = await client.query(
      `UPDATE aggregator.voice_job_items i
          SET status = 'submitted', provider_ref = ${value('provider_ref')}, provider_batch_ref = ${value('batch_ref')}, updated_at = now()
        WHERE ${BY_ITEM} AND i.status = 'resolved'`,
      [jobId, ids, valuesByItem(sorted, ['provider_ref', 'batch_ref'])]);
    // Items a callback moved on before this was recorded keep their status and gain their batch ref.
    if ((moved ?? 0) < calls.length) {
      await client.query(
        `UPDATE aggregator.voice_job_items i
            SET provider_batch_ref = ${value('batch_ref')}, updated_at = now()
          WHERE ${BY_ITEM} AND i.status IN ('sent', 'failed') AND i.provider_batch_ref IS NULL`,
        [jobId, ids, valuesByItem(sorted, ['batch_ref'])]);
    }
    const unsent = [...failures].sort(byItem);
    const { rowCount: failedNow } = unsent.length === 0 ? { rowCount: 0 } : await client.query(
      `UPDATE aggregator.voice_job_items i
          SET status = 'failed', error_reason = ${value('error_reason')}, updated_at = now()
        WHERE ${BY_ITEM} AND i.status = 'resolved'`,
      [jobId, unsent.map((f) => f.item_id), valuesByItem(unsent, ['error_reason'])]);
    const rows = [{ old: 'resolved' as const, new: 'submitted' as const, n: moved ?? 0 }, { old: 'resolved' as const, new: 'failed' as const, n: failedNow ?? 0 }];
    const replayed = calls.filter((c) => c.replayed).length;
    await moveCounters(client, jobId, deltaOf(rows));
    if (calls.length) {
      await client.query(
        `UPDATE aggregator.voice_jobs SET provider_response = jsonb_build_object(
           'batches_submitted', coalesce((provider_response ->> 'batches_submitted')::int, 0) + 1,
           'calls_accepted', coalesce((provider_response ->> 'calls_accepted')::int, 0) + $2,
           'calls_replayed', coalesce((provider_response ->> 'calls_replayed')::int, 0) + $3,
           'last_batch_ref', $4::text, 'last_submitted_at', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
          WHERE job_id = $1`, [jobId, calls.length - replayed, replayed, batchRef]);
    }
  });
}

/**
 * Applies provider callbacks: each update moves its item (named by the idempotency key
 * `<job_id>:<item_id>`) from `resolved` or `submitted` to `sent` or `failed` (error_reason), when
 * its provider_ref matches the one recorded (or none is recorded yet). Anything else — a key that
 * names no item, another ref, an item already final (terminal statuses never go back) — is ignored
 * and logged. One transaction per job.
 * @returns how many updates were applied and ignored, and the jobs the updates named.
 */
export async function applyCallbacks(pool: Pool, updates: CallbackUpdate[], logger: Logger): Promise<{ accepted: number; ignored: number; jobIds: string[] }> {
  const byJob = new Map<string, { item_id: string; provider_ref: string; status: string; error_reason: string | null }[]>();
  const malformed: string[] = [];
  for (const u of updates) {
    const key = parseCallKey(u.idempotency_key);
    if (!key) {
      malformed.push(u.idempotency_key);
      continue;
    }
    let list = byJob.get(key.jobId);
    if (!list) byJob.set(key.jobId, (list = []));
    list.push({ item_id: key.itemId, provider_ref: u.provider_ref, status: u.status, error_reason: u.status === 'failed' ? (u.error_reason ?? 'failed') : null });
  }
  let accepted = 0;
  const ignoredRefs: string[] = [];
  for (const [jobId, list] of byJob) {
    // One update per item (the first), in item-id order.
    const unique = [...new Map(list.map((u) => [u.item_id, u])).values()].sort((x, y) => (x.item_id < y.item_id ? -1 : 1));
    const ids = unique.map((u) => u.item_id);
    const values = valuesByItem(unique, ['provider_ref', 'status', 'error_reason']);
    const applied = await withTransaction(pool, async (client) => {
      // From resolved first, then from submitted: an item moves resolved → submitted meanwhile at
      // most, so the second statement still finds it.
      const moved: { old: ItemStatus; new: ItemStatus; item_id: string }[] = [];
      for (const from of ['resolved', 'submitted'] as const) {
        const { rows } = await client.query<{ new: ItemStatus; item_id: string }>(
          `UPDATE aggregator.voice_job_items i
              SET status = ${value('status')}, error_reason = ${value('error_reason')},
                  provider_ref = coalesce(i.provider_ref, ${value('provider_ref')}), updated_at = now()
            WHERE ${BY_ITEM} AND i.status = $4 AND (i.provider_ref IS NULL OR i.provider_ref = ${value('provider_ref')})
           RETURNING i.status AS new, i.item_id`,
          [jobId, ids, values, from]);
        moved.push(...rows.map((r) => ({ ...r, old: from })));
      }
      if (moved.length) await moveCounters(client, jobId, deltaOf(moved.map((r) => ({ ...r, n: 1 }))));
      return new Set(moved.map((r) => r.item_id));
    });
    accepted += applied.size;
    for (const u of list) if (!applied.has(u.item_id)) ignoredRefs.push(u.provider_ref);
  }
  const ignored = updates.length - accepted;
  if (ignored > 0) {
    logger.warn({ ignored, malformed_keys: malformed.slice(0, 10), provider_refs: ignoredRefs.slice(0, 10) },
      'voice callback updates ignored: unknown item or ref, or item already final');
  }
  return { accepted, ignored, jobIds: [...byJob.keys()] };
}

/** A resolved item of an export job with its encrypted identity. */
export interface ExportRow {
  seq: number;
  item_id: string;
  domain: string;
  name_encrypted: string | null;
  phone_encrypted: string | null;
  email_encrypted: string | null;
}

/**
 * Resolved items of `jobId` with `firstSeq <= seq <= lastSeq` that are participants of the job's
 * aggregator (as resolution already ensures for an export job; checked again here, since these rows
 * are decrypted into a file), in order (a range of the (job_id, seq) index).
 */
export async function resolvedContacts(db: Queryable, jobId: string, firstSeq: number, lastSeq: number): Promise<ExportRow[]> {
  const { rows } = await db.query<ExportRow>(
    `SELECT i.seq, i.item_id, p.domain, p.name_encrypted, p.phone_encrypted, p.email_encrypted
       FROM aggregator.voice_job_items i JOIN aggregator.voice_jobs j ON j.job_id = i.job_id
       JOIN aggregator.participants p ON p.participant_id = i.item_id AND p.aggregator_id = j.aggregator_id
      WHERE i.job_id = $1 AND i.seq BETWEEN $2 AND $3 AND i.status = 'resolved' ORDER BY i.seq`, [jobId, firstSeq, lastSeq]);
  return rows;
}

/** Records the written export of `jobId` (its object key, row count and time: retention counts from it). */
export async function recordExport(pool: Pool, jobId: string, objectKey: string, rows: number): Promise<void> {
  await withTransaction(pool, async (client) => {
    await client.query(
      `UPDATE aggregator.voice_jobs SET export_object_key = $2, provider_response = jsonb_build_object('export_object_key', $2::text, 'rows', $3::int),
         export_written_at = now(), version = version + 1, updated_at = now() WHERE job_id = $1`, [jobId, objectKey, rows]);
  });
}
