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

let url: string;
const pools: pg.Pool[] = [];
beforeAll(async () => {
  url = await createTestDatabase();
});
afterAll(async () => {
  for (const pool of pools) await pool.end();
});

/** The session's nice value (proc(5) /proc/PID/stat, the 19th field) and its parallel workers per gather. */
async function session(pool: pg.Pool): Promise<{ nice: number; parallel: string }> {
  const { rows: [row] } = await pool.query<{ pid: number; parallel: string }>(
    `SELECT pg_backend_pid() AS pid, current_setting('max_parallel_workers_per_gather') AS parallel`);
  const stat = await readFile(`/proc/${row.pid}/stat`, 'utf8');
  return { nice: Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16]), parallel: row.parallel };
}

describe('background database sessions', () => {
  it('run at the background nice value and plan without parallel workers; other sessions are left as they are', async () => {
    const background = new pg.Pool({ connectionString: url, max: 2 });
    const foreground = new pg.Pool({ connectionString: url, max: 2 });
    pools.push(background, foreground);
    lowerSessionPriority(background, 10);
    const before = await session(foreground);
    expect(Number(before.parallel)).toBeGreaterThan(0);
    expect(await session(background)).toEqual({ nice: Math.max(10, before.nice), parallel: '0' });
    expect(await session(foreground)).toEqual(before);
  });
});
