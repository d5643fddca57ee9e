/**
 * Worker heartbeats in `platform.worker_heartbeats`: each worker process upserts its row every
 * HEARTBEAT_MS; `/ready` on any service counts a worker as running when it beat within STALE_MS.
 */
import os from 'node:os';
import type { Pool, Queryable } from '../lib/db.ts';

export const HEARTBEAT_MS = 5_000;
const STALE_MS = 20_000;

/** Starts beating for `workerId`. @returns a function that stops and removes the heartbeat. */
export async function startHeartbeat(pool: Pool, workerId: string): Promise<() => Promise<void>> {
  const beat = () => pool.query(
    `INSERT INTO platform.worker_heartbeats (worker_id, hostname, pid) VALUES ($1, $2, $3)
     ON CONFLICT (worker_id) DO UPDATE SET last_seen_at = now()`, [workerId, os.hostname(), process.pid]);
  await beat();
  const timer = setInterval(() => beat().catch(() => {}), HEARTBEAT_MS);
  timer.unref();
  return async () => {
    clearInterval(timer);
    await pool.query('DELETE FROM platform.worker_heartbeats WHERE worker_id = $1', [workerId]).catch(() => {});
  };
}

/** Whether any worker (or any on `hostname`: one container's, for its healthcheck) beat recently, and how many. */
export async function workerAlive(db: Queryable, options: { hostname?: string } = {}): Promise<{ alive: boolean; count: number }> {
  const { rows } = await db.query<{ n: number }>(
    `SELECT count(*) AS n FROM platform.worker_heartbeats
      WHERE last_seen_at > now() - make_interval(secs => $1) AND ($2::text IS NULL OR hostname = $2)`,
    [STALE_MS / 1000, options.hostname ?? null]);
  return { alive: rows[0].n > 0, count: rows[0].n };
}
