import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { readVectorBackend } from '../../lib/search/vector-backend.ts';
import { createPool, type Pool } from '../../lib/platform/db.ts';
import { listMigrations, migrate, migrationStatus } from '../../lib/platform/migrate.ts';
import { createTestDatabase } from '../helpers/platform.ts';

const pools: Pool[] = [];
const dirs: string[] = [];
async function migrationsDir(): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'ldp-migrations-'));
  dirs.push(dir);
  return dir;
}
async function emptyDatabase(): Promise<{ pool: Pool; url: string }> {
  const url = await createTestDatabase({ empty: true });
  const pool = createPool(url, 4);
  pools.push(pool);
  return { pool, url };
}
afterEach(async () => {
  await Promise.all(pools.splice(0).map((p) => p.end()));
  await Promise.all(dirs.splice(0).map((d) => rm(d, { recursive: true, force: true })));
});

describe('migrations', () => {
  it('applies every numbered file once, records it, and does nothing the second time', async () => {
    const { pool } = await emptyDatabase();
    expect(await migrationStatus(pool)).toMatchObject({ current: false, applied: 0 });
    const files = (await listMigrations()).map((m) => m.name);
    expect(await migrate(pool)).toEqual(files);
    expect(await migrate(pool)).toEqual([]);
    const { rows } = await pool.query('SELECT version, name FROM platform.schema_migrations ORDER BY version');
    expect(rows.map((r) => r.name)).toEqual(files);
    expect(await migrationStatus(pool)).toEqual({ current: true, applied: files.length, expected: files.length });
    const { rows: schemas } = await pool.query(`SELECT nspname FROM pg_namespace WHERE nspname IN ('signals','search','aggregator','graphile_worker') ORDER BY 1`);
    expect(schemas.map((r) => r.nspname)).toEqual(['aggregator', 'graphile_worker', 'search', 'signals']);
    // The embedded PostgreSQL has no pgvector: the in-process index; a server with it: pgvector.
    expect(await readVectorBackend(pool)).toBe(inject('vectorBackend'));
  });

  it('lets two processes start at once: the advisory lock makes the second wait and find nothing to do', async () => {
    const { pool, url } = await emptyDatabase();
    const other = createPool(url, 2);
    pools.push(other);
    const [a, b] = await Promise.all([migrate(pool), migrate(other)]);
    const files = (await listMigrations()).map((m) => m.name);
    expect([a, b].sort((x, y) => y.length - x.length)).toEqual([files, []]);
    const { rows } = await pool.query('SELECT count(*)::int AS n FROM platform.schema_migrations');
    expect(rows[0].n).toBe(files.length);
  });

  it('rolls back every file of a run when one fails, so nothing is half-applied', async () => {
    const { pool } = await emptyDatabase();
    const dir = await migrationsDir();
    await writeFile(path.join(dir, '001_good.sql'), 'CREATE TABLE public.first_table (id int);');
    await writeFile(path.join(dir, '002_bad.sql'), 'CREATE TABLE public.second_table (id int); SELECT no_such_function();');
    await expect(migrate(pool, dir)).rejects.toThrow(/no_such_function/);
    const { rows } = await pool.query(`SELECT to_regclass('public.first_table') AS t`);
    expect(rows[0].t).toBeNull();
    expect(await migrationStatus(pool, dir)).toMatchObject({ current: false, applied: 0 });
  });

  it('refuses two files with the same version number', async () => {
    const dir = await migrationsDir();
    await writeFile(path.join(dir, '001_a.sql'), 'SELECT 1;');
    await writeFile(path.join(dir, '001_b.sql'), 'SELECT 1;');
    await expect(listMigrations(dir)).rejects.toThrow(/share version 1/);
  });
});
