/**
 * Background sessions (lib/platform/priority.ts `lowerSessionPriority`, used by the worker and the
 * voice callbacks' thread) on the embedded PostgreSQL of this host: reniced, and planning without
 * parallel workers, which the postmaster would start at its own (full) priority.
 */
import { readFile } from 'node:fs/promises';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lowerSessionPriority } from '../../lib/platform/priority.ts';
import { createTestDatabase } from '../helpers/platform.ts';
import { until } from '../helpers/until.ts';

let url: string;
const pools: pg.Pool[] = [];
beforeAll(async () => {
  url = await createTestDatabase();
});
afterAll(async () => {
  for (const pool of pools) await pool.end();
});

/**
 * The session's nice value (proc(5) /proc/PID/stat, the 19th field), its parallel workers per
 * gather, and the nice value of its autogroup (sched(7); absent on a kernel without autogroups).
 */
async function session(pool: pg.Pool): Promise<{ nice: number; parallel: string; autogroup?: number }> {
  const { rows: [row] } = await pool.query<{ pid: number; parallel: string }>(
    `SELECT pg_backend_pid() AS pid, current_setting('max_parallel_workers_per_gather') AS parallel`);
  const stat = await readFile(`/proc/${row.pid}/stat`, 'utf8');
  const autogroup = await readFile(`/proc/${row.pid}/autogroup`, 'utf8').then((text) => Number(/nice\s+(-?\d+)/.exec(text)![1]), () => undefined);
  return { nice: Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16]), parallel: row.parallel, ...(autogroup === undefined ? {} : { autogroup }) };
}

describe('background database sessions', () => {
  it('run at the background nice value and plan without parallel workers; other sessions are left as they are', async () => {
    const background = new pg.Pool({ connectionString: url, max: 2 });
    const foreground = new pg.Pool({ connectionString: url, max: 2 });
    pools.push(background, foreground);
    lowerSessionPriority(background, 10);
    const before = await session(foreground);
    expect(Number(before.parallel)).toBeGreaterThan(0);
    expect(await session(background)).toMatchObject({ nice: Math.max(10, before.nice), parallel: '0' });
    expect(await session(foreground)).toEqual(before);
  });

  it('renices the backend\'s autogroup, in which alone its nice value counts against other sessions', async (t) => {
    const background = new pg.Pool({ connectionString: url, max: 1 });
    const foreground = new pg.Pool({ connectionString: url, max: 1 });
    pools.push(background, foreground);
    lowerSessionPriority(background, 10);
    const before = await session(foreground);
    t.skip(before.autogroup === undefined, 'this kernel has no autogroups (/proc/PID/autogroup is absent; sched(7))');
    // Renices are limited to one per 100 ms on the host (retried): the first statements may come first.
    await until('the background session\'s autogroup to be reniced', async () => (await session(background)).autogroup === Math.max(10, before.autogroup!), 5_000);
    expect(await session(foreground)).toEqual(before);
  });
});
