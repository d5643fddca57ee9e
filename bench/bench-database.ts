/**
 * The database a benchmark runs on. By default a fresh embedded PostgreSQL (its own cluster: the
 * embedded path, vector index in the search process). With BENCH_DATABASE_URL, the server path:
 * a fresh database on that external PostgreSQL (e.g. Debian's PostgreSQL 15 with pgvector, as
 * docker-compose runs PostgreSQL 17 with it), created for the run and dropped after it; its role
 * must be allowed to create databases (a superuser also lets the benchmarks read the server's CPU
 * time, from its data directory, when the server runs on this machine).
 * Results go to bench/results/<name>.json (embedded) or <name>-server.json (server path).
 */
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../lib/platform/embedded-postgres.ts';
import { freePort } from '../lib/platform/free-port.ts';

/** The external server's connection string (any database on it), when the server path is benchmarked. */
export const SERVER_URL = process.env.BENCH_DATABASE_URL || undefined;

/** Which path this run measures. */
export const DATABASE_PATH: 'embedded' | 'server' = SERVER_URL ? 'server' : 'embedded';

/** `results` (a bench/results/*.json path) for this path: `-server` before `.json` on the server path. */
export const resultsFor = (results: string) => (SERVER_URL ? results.replace(/\.json$/, '-server.json') : results);

/**
 * A database for one run: `url`, and `dataDir` the server's data directory when this machine can
 * read it (its postmaster.pid: CPU time), else ''. Embedded: a new cluster in `dataDir`; server
 * path: a new database `ldp_bench_<label>_<random>` on SERVER_URL's server, dropped by `stop`;
 * with `keep`, `ldp_bench_<label>_kept`, created if missing and kept (reused by the next such run).
 * `stop` ends the embedded server.
 * @throws Error when the server refuses the connection or CREATE DATABASE.
 */
export async function benchDatabase(options: { dataDir: string; label: string; keep?: boolean }): Promise<EmbeddedPostgres> {
  if (!SERVER_URL) return startEmbeddedPostgres({ dataDir: options.dataDir, port: await freePort() });
  const admin = new pg.Client({ connectionString: SERVER_URL });
  await admin.connect();
  try {
    const label = options.label.replace(/[^a-z0-9]+/gi, '_').toLowerCase();
    // Kept: one name, reused by the next run (as BENCH_DIR's cluster is).
    const name = options.keep ? `ldp_bench_${label}_kept` : `ldp_bench_${label}_${randomBytes(4).toString('hex')}`;
    const { rowCount } = await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
    if (!rowCount) await admin.query(`CREATE DATABASE ${name}`);
    const { rows: [dir] } = await admin.query<{ d: string | null }>(`SELECT setting AS d FROM pg_settings WHERE name = 'data_directory'`);
    const url = new URL(SERVER_URL);
    url.pathname = `/${name}`;
    return {
      url: url.toString(), port: Number(url.port || 5432),
      dataDir: dir?.d && existsSync(path.join(dir.d, 'postmaster.pid')) ? dir.d : '',
      stop: async () => {
        if (options.keep) return;
        const drop = new pg.Client({ connectionString: SERVER_URL });
        await drop.connect();
        try {
          await drop.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
        } finally {
          await drop.end();
        }
      },
    };
  } finally {
    await admin.end();
  }
}

/** What the results record of the database: the path, and on the server path the server's version, pgvector's and its memory settings. */
export async function databaseFacts(url: string): Promise<Record<string, unknown>> {
  if (!SERVER_URL) return { path: DATABASE_PATH };
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows: [facts] } = await client.query(
      `SELECT current_setting('server_version') AS server_version,
              (SELECT extversion FROM pg_extension WHERE extname = 'vector') AS pgvector,
              (SELECT value FROM search.settings WHERE key = 'vector_backend') AS vector_backend,
              current_setting('shared_buffers') AS shared_buffers, current_setting('max_parallel_maintenance_workers') AS max_parallel_maintenance_workers,
              -- Huge pages change a new connection's first searches (docs/decisions.md); the status is PostgreSQL 17's.
              current_setting('huge_pages') AS huge_pages, current_setting('huge_pages_status', true) AS huge_pages_status`)
      .catch(() => client.query(`SELECT current_setting('server_version') AS server_version`));
    return { path: DATABASE_PATH, ...facts };
  } finally {
    await client.end();
  }
}
