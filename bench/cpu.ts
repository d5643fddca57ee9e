/** CPU time of the benchmarks' processes, read from /proc (Linux; proc(5) "/proc/pid/stat"). */
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';

const CLOCK_TICKS = 100; // USER_HZ on Linux

/** CPU seconds of a process: its own, and of its children it has waited for (/proc/PID/stat). */
export async function cpuSeconds(pid: number): Promise<{ own: number; children: number }> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => null);
  if (!stat) return { own: 0, children: 0 };
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // After the command name: state(0) ppid(1) … utime(11) stime(12) cutime(13) cstime(14).
  return { own: (Number(f[11]) + Number(f[12])) / CLOCK_TICKS, children: (Number(f[13]) + Number(f[14])) / CLOCK_TICKS };
}

/**
 * CPU seconds used by the PostgreSQL server so far: the postmaster, its live and its ended
 * backends; NaN when `clusterDir` is '' (an external server whose data directory is not readable here).
 */
export async function postgresCpuSeconds(clusterDir: string): Promise<number> {
  if (!clusterDir) return NaN;
  const postmaster = Number((await readFile(path.join(clusterDir, 'postmaster.pid'), 'utf8')).split('\n')[0]);
  const { own, children } = await cpuSeconds(postmaster);
  let live = 0;
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
    if (stat && Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === postmaster) live += (await cpuSeconds(Number(entry))).own;
  }
  return own + children + live;
}
