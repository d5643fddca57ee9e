/**
 * The aggregator dashboard (spec "GET /v1/dashboard"; issue 10 item 1).
 *
 * - The **rollup** per domain (participants by lifecycle status and by source, uploads with their
 *   row totals, live share, last activity) is computed by the `aggregator-dashboard-refresh` task
 *   into aggregator.dashboards — after each bulk upload, on a schedule, and when a read finds it
 *   missing, older than DASHBOARD_TTL_SECONDS or is asked to refresh — never per request.
 * - The **participant page** is read per request with a keyset over the index
 *   (aggregator_id, domain[, lifecycle status], created_at DESC, participant_id DESC): newest
 *   first, `limit` + 1 rows, no count. `total_matching` comes from the rollup.
 * - Display names are decrypted per request for the caller; the stored payload holds no PII.
 */
import type { Network } from '../network/config.ts';
import type { PiiCrypto } from '../platform/crypto.ts';
import type { Pool, Queryable } from '../platform/db.ts';
import { enqueue, enqueueMany, JOB_PRIORITY } from '../platform/jobs.ts';

/** Task computing one aggregator's rollup; payload `{aggregator_id}`. */
export const DASHBOARD_REFRESH_TASK = 'aggregator-dashboard-refresh';
/** Scheduled task (workers/crontab.ts) enqueueing DASHBOARD_REFRESH_TASK for stale dashboards. */
export const DASHBOARDS_REFRESH_TASK = 'aggregator-dashboards-refresh';

/** Lifecycle statuses counted; `pending` = stored but not yet pushed to signals (no status yet). */
export const DASHBOARD_STATUSES = ['draft', 'live', 'paused', 'retired', 'pending'] as const;
export const UPLOAD_STATUSES = ['pending', 'running', 'completed', 'failed'] as const;

export interface DomainRollup {
  domain: string;
  label: string;
  participants: {
    total: number;
    by_lifecycle_status: Record<string, number>;
    /** `bulk_upload`: onboarded from a file; `registration_link`: registered through a public link. */
    by_source: { bulk_upload: number; registration_link: number };
  };
  uploads: {
    total: number;
    by_status: Record<string, number>;
    /**
     * Row outcomes summed over the domain's uploads (passed = created + updated + unchanged), and
     * the participants sync uploads paused (issue 30).
     */
    rows: { passed: number; failed: number; skipped: number; created: number; updated: number; unchanged: number; paused: number };
  };
  /** live / total participants (0..1, 4 decimals; 0 without participants). */
  live_share: number;
  /** Latest change to a participant or an upload of the domain (ISO-8601 UTC), or null. */
  last_activity_at: string | null;
}

export interface StoredDashboard {
  by_domain: DomainRollup[];
  computed_at: string;
}

const iso = (d: Date | null) => (d ? d.toISOString() : null);

/**
 * Job priority of a recomputation, the scheduled ones included (they share its job key, and a
 * replaced job takes the replacing one's priority): a person's GET may wait for it
 * (DASHBOARD_REFRESH_WAIT_MS), and a pending job replaced under its key goes to the back of its
 * priority, so at 0 it starved behind a bulk upload's queue while registrations (one a second)
 * kept replacing it: >60 s, and every GET then waited 10 s (the soak, docs/decisions.md "Search
 * under load").
 */
export const DASHBOARD_REFRESH_PRIORITY = JOB_PRIORITY.awaited;

/**
 * Enqueues a recomputation of `aggregatorId`'s rollup (job key `dashboard:<id>`: one pending job
 * per aggregator however often it is asked; a job already running is followed by a new one), ahead
 * of background jobs (DASHBOARD_REFRESH_PRIORITY).
 * Call it after anything that changes an aggregator's participants or uploads — e.g. a public
 * registration — in the transaction that made the change.
 */
export async function enqueueDashboardRefresh(db: Queryable, aggregatorId: string): Promise<void> {
  await enqueue(db, {
    task: DASHBOARD_REFRESH_TASK, payload: { aggregator_id: aggregatorId }, jobKey: `dashboard:${aggregatorId}`, maxAttempts: 5,
    priority: DASHBOARD_REFRESH_PRIORITY,
  });
}

/**
 * Computes and stores the rollup of `aggregatorId` for every domain of `network`, counted in one
 * REPEATABLE READ snapshot whose start is `computed_at`. A slower concurrent computation never
 * overwrites a newer one. Cost: one grouped scan of the aggregator's participants and uploads.
 */
export async function computeDashboard(pool: Pool, network: Network, aggregatorId: string): Promise<StoredDashboard> {
  const client = await pool.connect();
  let computedAt: Date;
  let participants: { domain: string; status: string; bulk: boolean; n: number; last: Date }[];
  let uploads: { domain: string; status: string; n: number; passed: number; failed: number; skipped: number; created: number; updated: number;
    unchanged: number; paused: number; last: Date }[];
  try {
    await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    computedAt = (await client.query<{ now: Date }>('SELECT now()')).rows[0].now;
    participants = (await client.query(
      `SELECT domain, coalesce(lifecycle_status, 'pending') AS status, bulk_upload_id IS NOT NULL AS bulk,
              count(*)::int AS n, max(updated_at) AS last
         FROM aggregator.participants WHERE aggregator_id = $1 GROUP BY 1, 2, 3`, [aggregatorId])).rows;
    uploads = (await client.query(
      `SELECT participant_type AS domain, status, count(*)::int AS n, sum(passed)::int AS passed, sum(failed)::int AS failed,
              sum(skipped)::int AS skipped, sum(created)::int AS created, sum(updated)::int AS updated,
              sum(unchanged)::int AS unchanged, sum(paused)::int AS paused, max(updated_at) AS last
         FROM aggregator.bulk_uploads WHERE aggregator_id = $1 GROUP BY 1, 2`, [aggregatorId])).rows;
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    client.release();
  }
  const byDomain = [...network.domains.values()].map((d): DomainRollup => {
    const mine = participants.filter((p) => p.domain === d.name);
    const ups = uploads.filter((u) => u.domain === d.name);
    const byStatus = Object.fromEntries(DASHBOARD_STATUSES.map((s) => [s, 0]));
    for (const p of mine) byStatus[p.status] = (byStatus[p.status] ?? 0) + p.n;
    const total = mine.reduce((a, p) => a + p.n, 0);
    const last = [...mine, ...ups].reduce<Date | null>((a, r) => (!a || r.last > a ? r.last : a), null);
    return {
      domain: d.name,
      label: d.label,
      participants: {
        total,
        by_lifecycle_status: byStatus,
        by_source: {
          bulk_upload: mine.filter((p) => p.bulk).reduce((a, p) => a + p.n, 0),
          registration_link: mine.filter((p) => !p.bulk).reduce((a, p) => a + p.n, 0),
        },
      },
      uploads: {
        total: ups.reduce((a, u) => a + u.n, 0),
        by_status: Object.fromEntries(UPLOAD_STATUSES.map((s) => [s, ups.filter((u) => u.status === s).reduce((a, u) => a + u.n, 0)])),
        rows: {
          passed: ups.reduce((a, u) => a + u.passed, 0),
          failed: ups.reduce((a, u) => a + u.failed, 0),
          skipped: ups.reduce((a, u) => a + u.skipped, 0),
          created: ups.reduce((a, u) => a + u.created, 0),
          updated: ups.reduce((a, u) => a + u.updated, 0),
          unchanged: ups.reduce((a, u) => a + u.unchanged, 0),
          paused: ups.reduce((a, u) => a + u.paused, 0),
        },
      },
      live_share: total ? Number((byStatus.live / total).toFixed(4)) : 0,
      last_activity_at: iso(last),
    };
  });
  await pool.query(
    `INSERT INTO aggregator.dashboards (aggregator_id, rollup, computed_at) VALUES ($1, $2, $3)
     ON CONFLICT (aggregator_id) DO UPDATE SET rollup = EXCLUDED.rollup, computed_at = EXCLUDED.computed_at
      WHERE aggregator.dashboards.computed_at < EXCLUDED.computed_at`,
    [aggregatorId, JSON.stringify(byDomain), computedAt]);
  return { by_domain: byDomain, computed_at: computedAt.toISOString() };
}

/** The stored rollup of `aggregatorId` and its age in seconds, or null. */
export async function loadDashboard(db: Queryable, aggregatorId: string): Promise<(StoredDashboard & { ageSeconds: number }) | null> {
  const { rows } = await db.query<{ rollup: DomainRollup[]; computed_at: Date; age: number }>(
    `SELECT rollup, computed_at, extract(epoch FROM now() - computed_at)::float8 AS age
       FROM aggregator.dashboards WHERE aggregator_id = $1`, [aggregatorId]);
  const row = rows[0];
  return row ? { by_domain: row.rollup, computed_at: row.computed_at.toISOString(), ageSeconds: row.age } : null;
}

/**
 * Enqueues a recomputation and waits (polling every 100 ms, at most `waitMs`) for a rollup
 * computed after the request. @returns the new rollup, or null when none came in time.
 */
export async function refreshDashboard(pool: Pool, aggregatorId: string, waitMs: number): Promise<StoredDashboard | null> {
  const { rows: [{ now: requestedAt }] } = await pool.query<{ now: Date }>('SELECT now()');
  await enqueueDashboardRefresh(pool, aggregatorId);
  const deadline = Date.now() + waitMs;
  for (;;) {
    const stored = await loadDashboard(pool, aggregatorId);
    if (stored && Date.parse(stored.computed_at) > requestedAt.getTime()) return stored;
    if (Date.now() >= deadline) return null;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/**
 * Enqueues DASHBOARD_REFRESH_TASK for every approved aggregator whose rollup is missing or older
 * than `ttlSeconds` (the scheduled task). @returns how many were enqueued.
 */
export async function enqueueStaleDashboards(db: Queryable, ttlSeconds: number): Promise<number> {
  const { rows } = await db.query<{ aggregator_id: string }>(
    `SELECT a.aggregator_id FROM aggregator.aggregators a LEFT JOIN aggregator.dashboards d USING (aggregator_id)
      WHERE a.status = 'approved' AND (d.computed_at IS NULL OR d.computed_at < now() - make_interval(secs => $1))`, [ttlSeconds]);
  await enqueueMany(db, rows.map((r) => ({
    task: DASHBOARD_REFRESH_TASK, payload: { aggregator_id: r.aggregator_id }, jobKey: `dashboard:${r.aggregator_id}`, maxAttempts: 5,
    priority: DASHBOARD_REFRESH_PRIORITY,
  })));
  return rows.length;
}

/** A participant on a dashboard page. */
export interface DashboardParticipant {
  participant_id: string;
  display_name: string | null;
  lifecycle_status: string;
  source: 'bulk_upload' | 'registration_link';
  bulk_upload_id: string | null;
  created_at: string;
}

/** Where a page continues: after (created_at, participant_id) of the last row, in `domain`. */
export interface DashboardCursor {
  domain: string;
  createdAt: string;
  participantId: string;
}

/** Thrown for a cursor that is not one this module wrote. */
export class InvalidCursorError extends Error {
  name = 'InvalidCursorError';
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const TIMESTAMP = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/;

/** The opaque cursor text (base64url JSON) of `c`. */
export function encodeCursor(c: DashboardCursor): string {
  return Buffer.from(JSON.stringify([c.domain, c.createdAt, c.participantId])).toString('base64url');
}

/** Reads a cursor written by `encodeCursor`. @throws InvalidCursorError */
export function decodeCursor(text: string): DashboardCursor {
  try {
    const [domain, createdAt, participantId] = JSON.parse(Buffer.from(text, 'base64url').toString('utf8')) as string[];
    if (typeof domain === 'string' && TIMESTAMP.test(createdAt) && UUID.test(participantId)) return { domain, createdAt, participantId };
  } catch { /* below */ }
  throw new InvalidCursorError('cursor: not a next_cursor of this dashboard');
}

export interface PageRequest {
  aggregatorId: string;
  domain: string;
  /** Lifecycle status (`pending`: not pushed yet). */
  status?: string;
  cursor?: DashboardCursor;
  /** Rows to skip (page numbers); ignored with a cursor. */
  offset: number;
  limit: number;
}

/**
 * The SQL of one participant page: `limit` + 1 rows (to know whether more follow), newest first,
 * served by participants_dashboard_idx, or participants_dashboard_status_idx with a status.
 */
export function participantPageQuery(input: PageRequest): { text: string; values: unknown[] } {
  const values: unknown[] = [input.aggregatorId, input.domain, input.limit + 1];
  const where = ['aggregator_id = $1', 'domain = $2'];
  if (input.status) {
    values.push(input.status);
    where.push(`coalesce(lifecycle_status, 'pending') = $${values.length}`);
  }
  if (input.cursor) {
    values.push(input.cursor.createdAt, input.cursor.participantId);
    where.push(`(created_at, participant_id) < ($${values.length - 1}::timestamptz, $${values.length}::uuid)`);
  }
  const offset = input.cursor ? 0 : Math.max(0, Math.floor(input.offset));
  if (offset > 0) {
    // A page number: its first row is found by skipping `offset` entries of an index-only scan
    // (no table rows read), then the page is read as from a cursor.
    where.push(`(created_at, participant_id) <= (SELECT created_at, participant_id FROM aggregator.participants
       WHERE ${where.join(' AND ')} ORDER BY created_at DESC, participant_id DESC OFFSET ${offset} LIMIT 1)`);
  }
  // The text time gets its own name: ORDER BY created_at must mean the column, not an output alias.
  return {
    text: `SELECT participant_id, name_encrypted, coalesce(lifecycle_status, 'pending') AS status, bulk_upload_id,
                  to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS created_at_us
             FROM aggregator.participants
            WHERE ${where.join(' AND ')}
            ORDER BY created_at DESC, participant_id DESC
            LIMIT $3`,
    values,
  };
}

/**
 * One page of the aggregator's participants in `domain` (`participantPageQuery`), names decrypted
 * with `pii`, and the cursor of the next page (null on the last).
 */
export async function participantPage(db: Queryable, pii: PiiCrypto, input: PageRequest): Promise<{ participants: DashboardParticipant[]; nextCursor: string | null }> {
  const { rows } = await db.query<{
    participant_id: string; name_encrypted: string | null; status: string; bulk_upload_id: string | null; created_at_us: string;
  }>(participantPageQuery(input));
  const page = rows.slice(0, input.limit);
  const last = page[page.length - 1];
  return {
    participants: page.map((r) => ({
      participant_id: r.participant_id,
      display_name: r.name_encrypted ? pii.decrypt(r.name_encrypted) : null,
      lifecycle_status: r.status,
      source: r.bulk_upload_id ? 'bulk_upload' : 'registration_link',
      bulk_upload_id: r.bulk_upload_id,
      created_at: r.created_at_us,
    })),
    nextCursor: rows.length > input.limit && last
      ? encodeCursor({ domain: input.domain, createdAt: last.created_at_us, participantId: last.participant_id })
      : null,
  };
}

/** Participants of `rollup` matching the filters, from the counts (no recount). */
export function totalMatching(rollup: DomainRollup, status?: string): number {
  return status ? (rollup.participants.by_lifecycle_status[status] ?? 0) : rollup.participants.total;
}
