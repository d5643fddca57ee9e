/**
 * Enqueueing graphile-worker jobs on the caller's transaction: pass the transaction's client and the
 * job commits or vanishes with it (DESIGN.md, "The API only validates and enqueues").
 * Uses graphile-worker's SQL API (`graphile_worker.add_job` / `add_jobs`, see its docs "SQL add_job").
 */
import type { Queryable } from './db.ts';
import { withRequestId } from './request-context.ts';

/**
 * Job priorities, the one table of them (graphile-worker takes the numerically smallest first, then
 * the oldest; a job replaced under its key goes to the back of its priority):
 * - `awaited`: a person is waiting on the job's result (a GET that waits for a recomputation, a preview);
 * - `person`: one person's own record (a registration's push, the indexing of a few items), so that
 *   it is found while an upload's chunks are still queued;
 * - `normal`: the default (an upload's chunks, e-mails);
 * - `indexing`: search indexing of batches, behind onboarding;
 * - `upkeep`: repairs that can always wait (the search reconcile).
 * Why each moved: docs/decisions.md, "Search under load" (issue 32).
 */
export const JOB_PRIORITY = { awaited: -10, person: -5, normal: 0, indexing: 10, upkeep: 20 } as const;

export interface JobSpec {
  /** Task identifier, e.g. `bulk-upload-process`. */
  task: string;
  payload: unknown;
  /** Jobs with the same key replace each other while pending (deduplication). */
  jobKey?: string;
  queueName?: string;
  runAt?: Date;
  maxAttempts?: number;
  /** Numerically smaller runs first (default 0; JOB_PRIORITY). */
  priority?: number;
}

/**
 * Adds one job through `client` (a pool or a client inside a transaction). The current request id
 * (lib/platform/request-context.ts) travels in the payload, so the job's log lines carry it too.
 */
export async function enqueue(client: Queryable, spec: JobSpec): Promise<void> {
  await client.query(
    `SELECT graphile_worker.add_job(identifier => $1, payload => $2::json, queue_name => $3, run_at => $4,
       max_attempts => $5, job_key => $6, priority => $7)`,
    [spec.task, JSON.stringify(withRequestId(spec.payload ?? {})), spec.queueName ?? null, spec.runAt ?? null,
      spec.maxAttempts ?? null, spec.jobKey ?? null, spec.priority ?? null],
  );
}

/** Adds many jobs in one statement (`graphile_worker.add_jobs`), through `client`; request ids as `enqueue`. */
export async function enqueueMany(client: Queryable, specs: JobSpec[]): Promise<void> {
  if (specs.length === 0) return;
  await client.query(
    `SELECT 1 FROM graphile_worker.add_jobs(ARRAY(
       SELECT ROW(s.identifier, s.payload, s.queue_name, s.run_at, s.max_attempts, s.job_key, s.priority, NULL)::graphile_worker.job_spec
       FROM json_to_recordset($1::json) AS s(identifier text, payload json, queue_name text, run_at timestamptz,
         max_attempts integer, job_key text, priority integer)))`,
    [JSON.stringify(specs.map((s) => ({
      identifier: s.task, payload: withRequestId(s.payload ?? {}), queue_name: s.queueName ?? null, run_at: s.runAt?.toISOString() ?? null,
      max_attempts: s.maxAttempts ?? null, job_key: s.jobKey ?? null, priority: s.priority ?? null,
    })))],
  );
}

/**
 * Jobs due and not locked, per task identifier: the queue depth (graphile-worker's private tables,
 * read-only; graphile-worker 0.17 "Database schema"). Permanently failed jobs are not counted.
 */
export async function queueDepth(db: Queryable): Promise<Array<{ task: string; jobs: number }>> {
  const { rows } = await db.query<{ task: string; jobs: number }>(
    `SELECT t.identifier AS task, count(*)::int AS jobs
       FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks t ON t.id = j.task_id
      WHERE j.locked_at IS NULL AND j.run_at <= now() AND j.attempts < j.max_attempts
      GROUP BY t.identifier`);
  return rows;
}
