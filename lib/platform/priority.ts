/**
 * CPU priority for background work (BACKGROUND_NICE): a worker's jobs, or a service's background
 * thread, can keep the cores busy for seconds at a time, and request handling should not wait
 * behind them for a core (docs/decisions.md, "Voice campaigns"). Both helpers only ever lower a
 * priority (a higher nice value), which needs no privilege; setpriority(2), through node's
 * `os.setPriority`.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import type { Pool, PoolClient } from './db.ts';

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
 * Its autogroup is reniced too (lowerAutogroupPriority): without that, where the kernel groups
 * sessions, the backend's own nice value changes nothing against other backends.
 */
export function lowerSessionPriority(pool: Pool, nice: number): void {
  // pg-pool's onConnect hook (awaited before the session is handed out), not a 'connect' listener:
  // a statement queued from the listener ran beside the caller's first one, which node-postgres
  // reports with a DeprecationWarning on every start.
  const previous = pool.options.onConnect;
  (pool.options as { onConnect?: (client: PoolClient) => Promise<void> }).onConnect = async (client) => {
    await previous?.(client);
    const pid = (client as unknown as { processID: number | null }).processID;
    if (!pid) return;
    try {
      if (!readFileSync(`/proc/${pid}/cmdline`, 'latin1').startsWith('postgres')) return;
      if (os.getPriority(pid) < nice) os.setPriority(pid, nice);
    } catch {
      // Not visible here, or not ours to renice: the session keeps its priority.
      return;
    }
    lowerAutogroupPriority(pid, nice);
    // A failure only leaves the default (the session's next statement fails the same way if the
    // connection broke).
    await client.query('SET max_parallel_workers_per_gather = 0').catch(() => {});
  };
}

/** Tries of an autogroup's renice that the kernel refused for its rate (EAGAIN), 110 ms apart: one write a round succeeds, so 50 sessions opened at once all get theirs. */
const AUTOGROUP_TRIES = 50;

/**
 * Sets the nice value of the autogroup of process `pid` to `nice` unless it is that high already,
 * when `pid` leads a session of its own (its session id is its pid), as every PostgreSQL backend
 * does (it calls setsid(2) when the postmaster forks it). With autogroup scheduling (sched(7),
 * kernel.sched_autogroup_enabled: on in Debian's and Ubuntu's kernels) each session is a group that
 * shares the CPU with the others by the group's nice value alone, whatever its processes' nice
 * values: a backend at BACKGROUND_NICE still took as much CPU as a request's backend (measured:
 * docs/decisions.md, "Search under load"). Never done for a session that holds other processes
 * (an `ldp` process started from a shell shares that shell's). An unprivileged process may renice
 * one autogroup per 100 ms on the whole host (EAGAIN otherwise): tried again AUTOGROUP_TRIES times.
 * A kernel without autogroups (no /proc/PID/autogroup), or a process gone: nothing happens.
 */
export function lowerAutogroupPriority(pid: number, nice: number, tries = AUTOGROUP_TRIES): void {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[3]) !== pid) return;
    const current = Number(/nice\s+(-?\d+)/.exec(readFileSync(`/proc/${pid}/autogroup`, 'latin1'))?.[1] ?? 0);
    if (current < nice) writeFileSync(`/proc/${pid}/autogroup`, String(nice));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EAGAIN' && tries > 1) setTimeout(() => lowerAutogroupPriority(pid, nice, tries - 1), 110).unref();
  }
}
