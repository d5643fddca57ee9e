/**
 * CPU priority for background work (BACKGROUND_NICE): a worker's jobs, or a service's background
 * thread, can keep the cores busy for seconds at a time, and request handling should not wait
 * behind them for a core (docs/decisions.md, "Voice campaigns"). Both helpers only ever lower a
 * priority (a higher nice value), which needs no privilege; setpriority(2), through node's
 * `os.setPriority`.
 */
import { readFileSync } from 'node:fs';
import os from 'node:os';
import type { Pool } from './db.ts';

/**
 * Sets the calling thread's nice value to `nice` unless it is already that high. On Linux the nice
 * value belongs to the thread, so a worker thread (`ldp start`) yields while the services' main
 * thread keeps its priority.
 * @throws what `os.setPriority` throws (e.g. a platform without nice values).
 */
export function lowerThreadPriority(nice: number): void {
  if (os.getPriority() < nice) os.setPriority(nice);
}

/**
 * From now on, sets the nice value of each PostgreSQL session `pool` opens to `nice`, where the
 * server runs on this host (the embedded default, or a server beside the process): a backend is a
 * process of its own, and the statements of background work cost more CPU than its Node side. The
 * backend's process id is node-postgres's `processID` (the server's BackendKeyData); it is reniced
 * only when /proc shows a PostgreSQL process under that id. A server elsewhere, a platform without
 * /proc, or a process not ours to renice: nothing happens.
 * A reniced session also plans without parallel workers (`max_parallel_workers_per_gather = 0`,
 * its first statement): the postmaster starts them at its own priority, so a background statement's
 * parallel part ran at full priority beside people's requests — the dashboard rollup's scan of every
 * participant, recomputed after each registration, kept ~0.3 cores of nice-0 parallel workers busy
 * during a bulk upload (docs/decisions.md, "Search under load").
 */
export function lowerSessionPriority(pool: Pool, nice: number): void {
  pool.on('connect', (client) => {
    const pid = (client as unknown as { processID: number | null }).processID;
    if (!pid) return;
    try {
      if (!readFileSync(`/proc/${pid}/cmdline`, 'latin1').startsWith('postgres')) return;
      if (os.getPriority(pid) < nice) os.setPriority(pid, nice);
    } catch {
      // Not visible here, or not ours to renice: the session keeps its priority.
      return;
    }
    // Queued before anything the pool's caller sends on this session. A failure only leaves the
    // default (the session's next statement fails the same way if the connection broke).
    client.query('SET max_parallel_workers_per_gather = 0').catch(() => {});
  });
}
