/**
 * The platform's connection pool (lib/platform/db.ts `createPool`): an idle connection is kept,
 * with its warmed backend, past pg-pool's default of 10 s, and idle connections never keep a
 * process alive.
 */
import { spawn } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { createPool, type Pool } from '../../lib/platform/db.ts';
import { REPO_ROOT } from '../helpers/cli.ts';
import { createTestDatabase } from '../helpers/platform.ts';

const pools: Pool[] = [];
afterEach(async () => {
  await Promise.all(pools.splice(0).map((p) => p.end()));
});

const backendPid = async (pool: Pool) => (await pool.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0].pid;

describe('the connection pool', () => {
  it('keeps an idle connection, and its backend, past pg-pool\'s default idle timeout of 10 s', async () => {
    const pool = createPool(await createTestDatabase(), 2);
    pools.push(pool);
    const pid = await backendPid(pool);
    await new Promise((resolve) => setTimeout(resolve, 10_500));
    expect(pool.idleCount).toBe(1);
    expect(await backendPid(pool)).toBe(pid);
  }, 30_000);

  it('lets a process whose pool holds an idle connection exit at once', async () => {
    const url = await createTestDatabase();
    // A process that queries and never ends its pool: before, its idle connection kept it alive
    // for the idle timeout.
    const code = `import { createPool } from './lib/platform/db.ts';
      const pool = createPool(process.env.URL, 2);
      const { rows } = await pool.query('SELECT 41 + 1 AS n');
      console.log(rows[0].n);`;
    const started = performance.now();
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', code], {
      cwd: REPO_ROOT, env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', URL: url }, stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    child.stdout.on('data', (d) => { stdout += d; });
    const exitCode = await new Promise<number | null>((resolve) => {
      const timer = setTimeout(() => child.kill('SIGKILL'), 20_000);
      child.on('close', (c) => { clearTimeout(timer); resolve(c); });
    });
    expect(exitCode).toBe(0);
    expect(stdout.trim()).toBe('42');
    // Node and tsx start in ~0.5–2 s here; an idle connection held it open for 10 s or more.
    expect(performance.now() - started).toBeLessThan(8_000);
  }, 30_000);
});
