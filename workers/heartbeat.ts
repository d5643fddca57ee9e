/**
 * Worker heartbeats in `platform.worker_heartbeats`: each worker process upserts its row every
 * HEARTBEAT_MS; `/ready` on any service counts a worker as running when it beat within STALE_MS.
 * A process silent for DEAD_MS is taken for crashed: the jobs it held are unlocked for a retry.
 */
import os from 'node:os';
import type { Pool, Queryable } from '../lib/platform/db.ts';

export const HEARTBEAT_MS = 5_000;
const STALE_MS = 20_000;
/** Far above any event-loop stall of a live process, so its running jobs are never taken from it. */
export const DEAD_MS = 120_000;

/**
 * Starts beating for `workerId`, whose graphile-worker pools are `jobWorkerIds` (the `locked_by`
 * of the jobs it runs), and releases the jobs of processes found dead, now and at every 12th beat.
 * @returns a function that stops and removes the heartbeat.
 */
export async function startHeartbeat(pool: Pool, workerId: string, jobWorkerIds: string[]): Promise<() => Promise<void>> {
  const beat = () => pool.query(
    `INSERT INTO platform.worker_heartbeats (worker_id, hostname, pid, job_worker_ids) VALUES ($1, $2, $3, $4)
     ON CONFLICT (worker_id) DO UPDATE SET last_seen_at = now(), job_worker_ids = EXCLUDED.job_worker_ids`,
    [workerId, os.hostname(), process.pid, jobWorkerIds]);
  await beat();
  await releaseDeadWorkers(pool);
  let beats = 0;
  const timer = setInterval(() => {
    beat().then(() => (++beats % 12 === 0 ? releaseDeadWorkers(pool) : 0)).catch(() => {});
  }, HEARTBEAT_MS);
  timer.unref();
  return async () => {
    clearInterval(timer);
    await pool.query('DELETE FROM platform.worker_heartbeats WHERE worker_id = $1', [workerId]).catch(() => {});
  };
}

/**
 * Forgets worker processes silent for DEAD_MS and unlocks the jobs they held
 * (`graphile_worker.force_unlock_workers`), so those jobs run again now rather than after
 * graphile-worker's 4-hour lock expiry. @returns the number of dead processes found.
 */
export async function releaseDeadWorkers(db: Queryable): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    `WITH dead AS (
       DELETE FROM platform.worker_heartbeats WHERE last_seen_at < now() - make_interval(secs => $1) RETURNING job_worker_ids),
     unlocked AS (
       SELECT graphile_worker.force_unlock_workers(array_agg(id)) FROM dead, unnest(job_worker_ids) AS id HAVING count(*) > 0)
     SELECT (SELECT count(*) FROM dead) AS n, (SELECT count(*) FROM unlocked) AS unlocked`, [DEAD_MS / 1000]);
  return rows[0].n;
}

/** Whether any worker (or any on `hostname`: one container's, for its healthcheck) beat recently, and how many. */
export async function workerAlive(db: Queryable, options: { hostname?: string } = {}): Promise<{ alive: boolean; count: number }> {
  const { rows } = await db.query<{ n: number }>(
    `SELECT count(*) AS n FROM platform.worker_heartbeats
      WHERE last_seen_at > now() - make_interval(secs => $1) AND ($2::text IS NULL OR hostname = $2)`,
    [STALE_MS / 1000, options.hostname ?? null]);
  return { alive: rows[0].n > 0, count: rows[0].n };
}
