/**
 * Database migrations: graphile-worker's own schema, then the numbered plain-SQL files in sql/.
 *
 * Each pending file is applied exactly once, recorded in `platform.schema_migrations`, all in one
 * transaction that holds an advisory lock, so two processes starting together cannot race: the
 * second waits, then finds nothing left to do.
 */
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Logger as WorkerLogger, runMigrations } from 'graphile-worker';
import type { Pool } from './db.ts';
import { withTransaction } from './db.ts';

export const SQL_DIR = fileURLToPath(new URL('../../sql/', import.meta.url));
const FILE_PATTERN = /^(\d{3})_[a-z0-9_-]+\.sql$/;
const LOCK_KEY = 'ldp:migrations';
// graphile-worker logs its migration steps at info level; ours are reported by the caller.
const silentLogger = new WorkerLogger(() => () => {});

export interface MigrationFile {
  version: number;
  name: string;
  file: string;
}

/** Lists sql/NNN_name.sql in version order. @throws Error on a duplicate version number. */
export async function listMigrations(dir = SQL_DIR): Promise<MigrationFile[]> {
  const files = (await readdir(dir)).filter((f) => FILE_PATTERN.test(f)).sort();
  const seen = new Set<number>();
  return files.map((name) => {
    const version = Number(FILE_PATTERN.exec(name)![1]);
    if (seen.has(version)) throw new Error(`Two migrations share version ${version} in ${dir}`);
    seen.add(version);
    return { version, name, file: path.join(dir, name) };
  });
}

/**
 * Applies graphile-worker's migrations and every pending file of `dir`.
 * @returns the names of the files applied by this call (empty when already current).
 */
export async function migrate(pool: Pool, dir = SQL_DIR): Promise<string[]> {
  await runMigrations({ pgPool: pool, logger: silentLogger });
  const migrations = await listMigrations(dir);
  return withTransaction(pool, async (client) => {
    await client.query('SELECT pg_advisory_xact_lock(hashtext($1))', [LOCK_KEY]);
    await client.query(`CREATE SCHEMA IF NOT EXISTS platform`);
    await client.query(`CREATE TABLE IF NOT EXISTS platform.schema_migrations (
      version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
    const { rows } = await client.query<{ version: number }>('SELECT version FROM platform.schema_migrations');
    const applied = new Set(rows.map((r) => r.version));
    const done: string[] = [];
    for (const m of migrations) {
      if (applied.has(m.version)) continue;
      await client.query(await readFile(m.file, 'utf8'));
      await client.query('INSERT INTO platform.schema_migrations (version, name) VALUES ($1, $2)', [m.version, m.name]);
      done.push(m.name);
    }
    return done;
  });
}

/** Whether every migration file of `dir` is recorded as applied (used by `/ready`). */
export async function migrationStatus(pool: Pool, dir = SQL_DIR): Promise<{ current: boolean; applied: number; expected: number }> {
  const expected = (await listMigrations(dir)).map((m) => m.version);
  // Before the first migration the table does not exist: that reads as nothing applied.
  const { rows } = await pool.query<{ version: number }>('SELECT version FROM platform.schema_migrations')
    .catch(() => ({ rows: [] as { version: number }[] }));
  const applied = new Set(rows.map((r) => r.version));
  return { current: expected.every((v) => applied.has(v)), applied: applied.size, expected: expected.length };
}
