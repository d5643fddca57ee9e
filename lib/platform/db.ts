/** PostgreSQL access: one pg Pool per process, a transaction helper and a one-client helper. */
import pg from 'pg';

export type Pool = pg.Pool;
export type PoolClient = pg.PoolClient;
/** Anything that can run a query: the pool or a client inside a transaction. */
export type Queryable = Pick<pg.Pool, 'query'> | pg.PoolClient;

// Return int8 (count(*), bigint ids) as numbers: our counts stay far below 2^53.
pg.types.setTypeParser(pg.types.builtins.INT8, (v) => Number(v));

/**
 * How long an idle pooled connection is kept (ms): PgBouncer's `server_idle_timeout` (600 s), not
 * pg-pool's 10 s. A new PostgreSQL backend is slow for its first queries: it maps each shared
 * buffer it touches for the first time (a page fault per 4 KB page unless the server uses huge
 * pages). Measured on the full facility file (docs/decisions.md,
 * "A new connection's first searches"): a text search cost the server path's PostgreSQL 25.8 ms of
 * CPU in a new backend's first 60 searches against 8.2–9.5 ms after; the embedded path 9.7 against
 * 2.7. With 10 s, every lull or end of a burst closed the connections a burst had warmed.
 */
export const IDLE_CONNECTION_MS = 600_000;

/**
 * Creates a pool on `connectionString` with at most `max` connections, kept while idle for
 * IDLE_CONNECTION_MS, its sessions named `applicationName` (pg_stat_activity.application_name).
 * Idle connections do not keep the process alive (pg-pool `allowExitOnIdle`).
 */
export function createPool(connectionString: string, max = 10, applicationName = 'ldp'): pg.Pool {
  const pool = new pg.Pool({ connectionString, max, application_name: applicationName, idleTimeoutMillis: IDLE_CONNECTION_MS, allowExitOnIdle: true });
  // A client losing its connection (e.g. a database restart) must not crash the process: idle
  // clients report on the pool, checked-out ones on themselves; the query in flight still fails.
  pool.on('error', () => {});
  pool.on('connect', (client) => client.on('error', () => {}));
  return pool;
}

/**
 * Runs `fn` on one client, outside a transaction (each statement commits alone): for reads that
 * need one connection but no transaction, whose BEGIN and COMMIT would cost two round trips.
 */
export async function withClient<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  try {
    return await fn(client);
  } finally {
    client.release();
  }
}

/**
 * Runs `fn` inside BEGIN/COMMIT on one client; rolls back and rethrows if `fn` throws.
 * Jobs enqueued through `client` (lib/jobs.ts) commit or vanish with the transaction.
 */
export async function withTransaction<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  } finally {
    client.release();
  }
}

/**
 * Runs `ANALYZE (SKIP_LOCKED) table` when more than `minRows` rows and more than `share` of its
 * rows changed since the planner's statistics were taken (`pg_stat_user_tables.n_mod_since_analyze`
 * against `pg_class.reltuples`). Right after a bulk write, until autovacuum's own ANALYZE a minute
 * or two later, the statistics describe the table as it was: a lookup by key can then be planned
 * on the wrong index and read the whole table (docs/decisions.md, "Bulk onboarding III").
 * `table` is a trusted, schema-qualified name (never user input). `skipLocked` (default true):
 * a concurrent analyze (autovacuum's, another job's) is not waited for — then the statistics may
 * still be stale when this returns; false waits for it and analyzes after it. `changed`: rows the
 * caller knows it changed, counted when the statistics' own count is lower (a backend reports its
 * writes to them up to a second after its commit, so rows committed just now may be missing).
 * @returns whether it analyzed. @throws Error from the database.
 */
export async function analyzeIfChanged(db: Queryable, table: string,
  options: { minRows: number; share: number; skipLocked?: boolean; changed?: number }): Promise<boolean> {
  const { rows: [stats] } = await db.query<{ changed: number; rows: number }>(
    `SELECT s.n_mod_since_analyze::float8 AS changed, greatest(c.reltuples, 0)::float8 AS rows
       FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid WHERE s.relid = $1::regclass`, [table]);
  if (!stats || Math.max(stats.changed, options.changed ?? 0) <= Math.max(options.minRows, options.share * stats.rows)) return false;
  await db.query(`ANALYZE ${options.skipLocked === false ? '' : '(SKIP_LOCKED) '}${table}`);
  return true;
}
