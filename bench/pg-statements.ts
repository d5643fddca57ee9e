/**
 * PostgreSQL's own account of a benchmark's statements (`BENCH_PG_STATEMENTS=1`): restart the
 * embedded server with pg_stat_statements loaded (nested statements tracked, so a trigger's or a
 * function's statements show too), reset the counters where a measured part starts, read the
 * costliest statements where it ends. Shared by bench/bulk-upload.ts and bench/voice.ts.
 */
import pg from 'pg';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../lib/platform/embedded-postgres.ts';

/** Whether this run collects statement statistics (`BENCH_PG_STATEMENTS=1`). */
export const PG_STATEMENTS = process.env.BENCH_PG_STATEMENTS === '1';

/** One statement as pg_stat_statements counts it: calls, total execution time (ms), rows, the WAL it wrote (MB, full-page images), its text (≤ 300 characters). */
export interface StatementCost { calls: number; total_ms: number; rows: number; wal_mb: number; wal_fpi: number; query: string }

/** With BENCH_PG_STATEMENTS=1, restarts the embedded server `db` (cluster `dataDir`) with pg_stat_statements loaded; else answers `db`. */
export async function withStatementStats(db: EmbeddedPostgres, dataDir: string): Promise<EmbeddedPostgres> {
  if (!PG_STATEMENTS) return db;
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  await client.query("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'");
  await client.query("ALTER SYSTEM SET pg_stat_statements.track = 'all'");
  await client.query('ALTER SYSTEM SET log_autovacuum_min_duration = 0');
  await client.end();
  await db.stop();
  const restarted = await startEmbeddedPostgres({ dataDir, port: db.port });
  const again = new pg.Client({ connectionString: restarted.url });
  await again.connect();
  await again.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
  await again.end();
  return restarted;
}

/** With BENCH_PG_STATEMENTS=1, forgets the statements counted so far. */
export async function resetStatements(pool: pg.Pool): Promise<void> {
  if (PG_STATEMENTS) await pool.query('SELECT pg_stat_statements_reset()');
}

/** The `limit` statements that took PostgreSQL longest since the last reset (BENCH_PG_STATEMENTS=1), else undefined. */
export async function topStatements(pool: pg.Pool, limit = 25): Promise<StatementCost[] | undefined> {
  if (!PG_STATEMENTS) return undefined;
  const { rows } = await pool.query<StatementCost>(
    `SELECT calls::int, round(total_exec_time)::int AS total_ms, rows::int,
            round(wal_bytes::numeric / 1048576, 1)::float8 AS wal_mb, wal_fpi::int, left(regexp_replace(query, '\\s+', ' ', 'g'), 300) AS query
       FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT $1`, [limit]);
  return rows;
}
