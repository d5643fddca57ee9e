/** PostgreSQL access: one pg Pool per process, a transaction helper and a one-client helper. */
import pg from 'pg';

export type Pool = pg.Pool;
export type PoolClient = pg.PoolClient;
/** Anything that can run a query: the pool or a client inside a transaction. */
export type Queryable = Pick<pg.Pool, 'query'> | pg.PoolClient;

// Return int8 (count(*), bigint ids) as numbers: our counts stay far below 2^53.
pg.types.setTypeParser(pg.types.builtins.INT8, (v) => Number(v));

/** Creates a pool on `connectionString` with at most `max` connections. */
export function createPool(connectionString: string, max = 10): pg.Pool {
  const pool = new pg.Pool({ connectionString, max, application_name: 'ldp' });
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
