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
  await releaseCrashedLocalWorkers(pool, workerId);
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

/**
 * Unlocks at once the jobs of worker processes of this host whose process no longer exists (a
 * SIGKILL, a power cut: issue 15's crash drills), rather than after DEAD_MS. Only a pid that is
 * certainly gone counts (`kill(pid, 0)` fails with ESRCH); a live or reused pid is left to DEAD_MS.
 * @returns the number of crashed processes found.
 */
export async function releaseCrashedLocalWorkers(db: Queryable, ownWorkerId: string): Promise<number> {
  const { rows } = await db.query<{ worker_id: string; pid: number }>(
    'SELECT worker_id, pid FROM platform.worker_heartbeats WHERE hostname = $1 AND worker_id <> $2', [os.hostname(), ownWorkerId]);
  const gone = rows.filter((r) => {
    try {
      process.kill(r.pid, 0);
      return false;
    } catch (err) {
      return (err as NodeJS.ErrnoException).code === 'ESRCH';
    }
  }).map((r) => r.worker_id);
  if (gone.length === 0) return 0;
  await db.query(
    `WITH dead AS (DELETE FROM platform.worker_heartbeats WHERE worker_id = ANY($1) RETURNING job_worker_ids)
     SELECT graphile_worker.force_unlock_workers(array_agg(id)) FROM dead, unnest(job_worker_ids) AS id HAVING count(*) > 0`, [gone]);
  return gone.length;
}

/** Whether any worker (or any on `hostname`: one container's, for its healthcheck) beat recently, and how many. */
export async function workerAlive(db: Queryable, options: { hostname?: string } = {}): Promise<{ alive: boolean; count: number }> {
  const { rows } = await db.query<{ n: number }>(
    `SELECT count(*) AS n FROM platform.worker_heartbeats
      WHERE last_seen_at > now() - make_interval(secs => $1) AND ($2::text IS NULL OR hostname = $2)`,
    [STALE_MS / 1000, options.hostname ?? null]);
  return { alive: rows[0].n > 0, count: rows[0].n };
}
