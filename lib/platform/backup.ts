/**
 * Backups of an instance that restore (`ldp backup --out DIR`, `ldp restore DIR`;
 * docs/operations.md, "Backup and restore"; docs/decisions.md, issue 31).
 *
 * A backup is a directory:
 *
 *   manifest.json        written last, so a directory without it is no finished backup: versions,
 *                        and the path, size and SHA-256 of every other file
 *   database/cluster/…   the embedded default: a base backup of <DATA_DIR>/postgres (PostgreSQL's
 *                        low-level backup API, as pg_basebackup does), restored by starting it
 *   database/ldp.dump    a server (DATABASE_URL): `pg_dump --format=custom`, restored by pg_restore
 *   objects/<key>        every stored object (the filesystem folder or the S3 bucket)
 *   keys/<name>          the files of <DATA_DIR>/keys
 *   search-index/<name>  the files of <DATA_DIR>/search-index (the search process's vector index
 *                        as last saved), copied before the database: its change cursor is then
 *                        never ahead of the copied rows, and the restored search process loads it
 *                        and catches up instead of building another graph (one that would answer
 *                        near-ties differently); a file that does not match is rebuilt, as before
 *
 * The database is copied first (after the index file), the objects after it. An object is stored before any row names it
 * (an upload's file, then its job; a report, then the job's key), and objects are never
 * overwritten, so every object the copied database names is still there when the objects are
 * copied — unless retention deleted it in between, which it does only to rows already past
 * retention. The other order would copy rows naming objects stored after the object copy.
 *
 * Files are written 0600 in 0700 directories: a backup holds the PII key and personal data.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { chmod, lchown, mkdir, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { promisify } from 'node:util';
import pg from 'pg';
import { z } from 'zod';
import { createPool } from './db.ts';
import { clusterUser, startEmbeddedPostgres } from './embedded-postgres.ts';
import { listMigrations, migrate } from './migrate.ts';
import { mkdirPrivate, PRIVATE_DIR_MODE, PRIVATE_FILE_MODE } from './private-files.ts';
import type { ObjectStorage } from './storage.ts';

const run = promisify(execFile);

export const BACKUP_FORMAT = 'ldp-backup/1';
const MANIFEST = 'manifest.json';
const DUMP_FILE = 'database/ldp.dump';
const CLUSTER_DIR = 'database/cluster';
/** The search process's vector index files, in the backup and in DATA_DIR. */
const SEARCH_INDEX_DIR = 'search-index';

/** A backup that cannot be made or restored, or a target that is not empty; the message says why. */
export class BackupError extends Error {
  name = 'BackupError';
}

/** A path inside a backup: `/`-separated segments of `[A-Za-z0-9._-]`, no `.` or `..`. */
const SEGMENT = /^[A-Za-z0-9._-]{1,255}$/;
const safePath = (p: string) => p.length <= 4096 && p.split('/').every((s) => SEGMENT.test(s) && s !== '.' && s !== '..');
const relPath = z.string().refine(safePath, 'expected a relative path of [A-Za-z0-9._-] segments');

const manifestSchema = z.object({
  format: z.literal(BACKUP_FORMAT),
  created_at: z.string(),
  platform: z.object({ version: z.string() }),
  postgres: z.object({ server_version: z.string(), major: z.number().int() }),
  /** Highest applied sql/NNN migration (null: none applied). */
  migration_version: z.number().int().nullable(),
  database: z.object({
    method: z.enum(['base-backup', 'pg_dump']),
    /** The pg_dump that wrote the dump (`pg_dump (PostgreSQL) 15.18 …`). */
    tool: z.string().optional(),
    /** base-backup: every directory of the cluster, relative to database/cluster (empty ones too). */
    directories: z.array(relPath).optional(),
  }),
  objects: z.object({ source: z.string(), count: z.number().int(), bytes: z.number() }),
  keys: z.object({
    /** Variables that gave a key instead of a file at backup time: not in the backup. */
    from_environment: z.array(z.string()),
    /** SHA-256 (hex) of the PII key's 32 bytes: a restore refuses a different key. */
    pii_key_sha256: z.string().nullable(),
  }),
  files: z.array(z.object({ path: relPath, size: z.number().int().min(0), sha256: z.string().regex(/^[0-9a-f]{64}$/) })),
});

export type BackupManifest = z.infer<typeof manifestSchema>;
type BackupFile = BackupManifest['files'][number];

/** SHA-256 (hex) of the PII key's bytes (`key`: base64, as PII_KEY and keys/pii.key hold it). */
export function piiKeyFingerprint(key: string): string {
  return createHash('sha256').update(Buffer.from(key.trim(), 'base64')).digest('hex');
}

/** Streams `source` into `<root>/<rel>` (0600), hashing it on the way, and records it in `files`. */
async function writeTracked(root: string, rel: string, source: Readable, files: BackupFile[]): Promise<void> {
  const file = path.join(root, rel);
  await mkdirPrivate(path.dirname(file));
  const hash = createHash('sha256');
  let size = 0;
  const tap = new Transform({
    transform(chunk: Buffer, _enc, done) {
      hash.update(chunk);
      size += chunk.length;
      done(null, chunk);
    },
  });
  await pipeline(source, tap, createWriteStream(file, { mode: PRIVATE_FILE_MODE }));
  await chmod(file, PRIVATE_FILE_MODE);
  files.push({ path: rel, size, sha256: hash.digest('hex') });
}

/** Size and SHA-256 of a file, read as a stream. */
async function hashFile(file: string): Promise<{ size: number; sha256: string }> {
  const hash = createHash('sha256');
  let size = 0;
  for await (const chunk of createReadStream(file) as AsyncIterable<Buffer>) {
    hash.update(chunk);
    size += chunk.length;
  }
  return { size, sha256: hash.digest('hex') };
}

const missing = (err: unknown) => (err as NodeJS.ErrnoException).code === 'ENOENT';

// --- PostgreSQL's client tools -------------------------------------------------------------------

export interface PgTool {
  path: string;
  /** `pg_dump (PostgreSQL) 17.5` */
  version: string;
  major: number;
}

/** Where PostgreSQL's client tools usually are, besides PATH (Debian/Ubuntu, RHEL, source builds). */
async function toolDirs(): Promise<string[]> {
  const dirs = (process.env.PATH ?? '').split(path.delimiter).filter(Boolean);
  for (const [parent, pattern, sub] of [['/usr/lib/postgresql', /^\d+$/, 'bin'], ['/usr', /^pgsql-\d+$/, 'bin']] as const) {
    const names = await readdir(parent).catch(() => [] as string[]);
    for (const name of names) if (pattern.test(name)) dirs.push(path.join(parent, name, sub));
  }
  dirs.push('/usr/local/pgsql/bin');
  return [...new Set(dirs)];
}

/**
 * The newest `tool` (pg_dump, pg_restore) of major version `minMajor` or newer: in `binDir` alone
 * when given, else on PATH and in the usual installation folders. pg_dump refuses a server newer
 * than itself; pg_restore cannot read a dump of a newer pg_dump.
 * @throws BackupError naming what was found and what to install
 */
export async function findPgTool(tool: 'pg_dump' | 'pg_restore', minMajor: number, binDir?: string): Promise<PgTool> {
  const found: PgTool[] = [];
  for (const dir of binDir ? [binDir] : await toolDirs()) {
    const file = path.join(dir, tool);
    try {
      const { stdout } = await run(file, ['--version']);
      const match = /\(PostgreSQL\)\s+(\d+)/.exec(stdout);
      if (match) found.push({ path: file, version: stdout.trim(), major: Number(match[1]) });
    } catch {
      // not there, or not runnable
    }
  }
  const usable = found.filter((t) => t.major >= minMajor).sort((a, b) => b.major - a.major);
  if (usable.length) return usable[0];
  const seen = found.length ? ` (found: ${found.map((t) => `${t.version} at ${t.path}`).join('; ')})` : '';
  throw new BackupError(`${tool} ${minMajor} or newer is needed for PostgreSQL ${minMajor}${seen}: install postgresql-client-${minMajor}`
    + ` (Debian/Ubuntu: from the PostgreSQL apt repository when the distribution's is older), or name its bin directory with --pg-bin`);
}

/** A connection string without its password, and the password (for PGPASSWORD: not on a command line). */
function splitPassword(url: string): { url: string; password?: string } {
  const u = new URL(url);
  const password = u.password ? decodeURIComponent(u.password) : undefined;
  u.password = '';
  return { url: u.toString(), password };
}

async function runPgTool(tool: PgTool, args: string[], databaseUrl: string): Promise<void> {
  const { url, password } = splitPassword(databaseUrl);
  try {
    await run(tool.path, [...args, `--dbname=${url}`], {
      env: { ...process.env, ...(password ? { PGPASSWORD: password } : {}), PGAPPNAME: 'ldp-backup' },
      maxBuffer: 16 * 1024 * 1024,
    });
  } catch (err) {
    const stderr = (err as { stderr?: string }).stderr?.trim();
    throw new BackupError(`${path.basename(tool.path)} failed: ${stderr || (err as Error).message}`);
  }
}

// --- The database --------------------------------------------------------------------------------

async function databaseFacts(client: pg.Client): Promise<{ server_version: string; major: number; migration_version: number | null }> {
  const { rows: [v] } = await client.query<{ server_version: string; num: string }>(
    `SELECT current_setting('server_version') AS server_version, current_setting('server_version_num') AS num`);
  const { rows: [m] } = await client.query<{ version: number | null }>('SELECT max(version) AS version FROM platform.schema_migrations')
    .catch(() => ({ rows: [{ version: null }] }));
  return { server_version: v.server_version, major: Math.floor(Number(v.num) / 10000), migration_version: m.version };
}

/**
 * What a base backup leaves out (PostgreSQL's documentation, "Making a Base Backup Using the Low
 * Level API", and what pg_basebackup skips): the contents of these directories (kept, empty)…
 */
const EMPTIED_DIRS = new Set(['pg_wal', 'pg_replslot', 'pg_dynshmem', 'pg_notify', 'pg_serial', 'pg_snapshots', 'pg_stat_tmp', 'pg_subtrans']);
/** …these files of the cluster's top directory (`server.log`: the embedded server's log)… */
const SKIPPED_FILES = new Set(['postmaster.pid', 'postmaster.opts', 'server.log', 'current_logfiles',
  'backup_label', 'backup_label.old', 'tablespace_map', 'tablespace_map.old']);
/** …and temporary files and relation caches anywhere. */
const skippedAnywhere = (name: string) => name.startsWith('pgsql_tmp') || name === 'pg_internal.init';
const WAL_SEGMENT = /^[0-9A-F]{24}$/;

/**
 * Copies the running cluster in `clusterDir` (reachable at `databaseUrl` as a superuser) into
 * `<out>/database/cluster`: pg_backup_start, the files, pg_backup_stop's backup_label, then the WAL
 * from the backup's start to its end, kept meanwhile by a temporary replication slot. The copy
 * starts as is: PostgreSQL replays that WAL at its first start and is then consistent as of the end
 * of the backup. Returns the cluster's directories (relative).
 * @throws BackupError on a tablespace (not supported) or when PostgreSQL refuses the backup
 */
async function baseBackup(client: pg.Client, clusterDir: string, out: string, files: BackupFile[]): Promise<string[]> {
  const directories: string[] = [];
  await client.query(`SELECT pg_create_physical_replication_slot($1, true, true)`, [`ldp_backup_${process.pid}`]);
  await client.query(`SELECT pg_backup_start('ldp backup', true)`);
  let stopped = false;
  try {
    const copy = (rel: string) => writeTracked(out, `${CLUSTER_DIR}/${rel}`, createReadStream(path.join(clusterDir, rel)), files).catch((err) => {
      if (!missing(err)) throw err; // a file removed while we copy (a dropped table): replaying the WAL removes it too
    });
    let control: string | undefined;
    const walk = async (rel: string) => {
      const entries = await readdir(path.join(clusterDir, rel), { withFileTypes: true }).catch((err) => (missing(err) ? [] : Promise.reject(err)));
      for (const entry of entries) {
        const child = rel ? `${rel}/${entry.name}` : entry.name;
        if (skippedAnywhere(entry.name) || (!rel && SKIPPED_FILES.has(entry.name))) continue;
        if (entry.isSymbolicLink()) throw new BackupError(`${path.join(clusterDir, child)} is a link (a tablespace?): only clusters without tablespaces are backed up`);
        if (entry.isDirectory()) {
          directories.push(child);
          if (!(!rel && EMPTIED_DIRS.has(entry.name))) await walk(child);
        } else if (entry.isFile()) {
          // pg_basebackup sends pg_control last; so do we.
          if (child === 'global/pg_control') control = child;
          else await copy(child);
        }
      }
    };
    await walk('');
    if (control) await copy(control);
    const { rows: [end] } = await client.query<{ labelfile: string; spcmapfile: string | null; wal: string }>(
      `SELECT labelfile, spcmapfile, pg_walfile_name(lsn) AS wal FROM pg_backup_stop(false)`);
    stopped = true;
    await writeTracked(out, `${CLUSTER_DIR}/backup_label`, Readable.from([Buffer.from(end.labelfile)]), files);
    if (end.spcmapfile) await writeTracked(out, `${CLUSTER_DIR}/tablespace_map`, Readable.from([Buffer.from(end.spcmapfile)]), files);
    const first = /START WAL LOCATION: .*\(file ([0-9A-F]{24})\)/.exec(end.labelfile)?.[1];
    if (!first) throw new BackupError('pg_backup_stop returned a backup label without its start WAL file');
    for (const name of (await readdir(path.join(clusterDir, 'pg_wal'))).sort()) {
      // Later segments are recycled files or WAL after the backup's end: not needed.
      if ((WAL_SEGMENT.test(name) && name >= first && name <= end.wal) || name.endsWith('.history')) await copy(`pg_wal/${name}`);
    }
    return directories;
  } finally {
    if (!stopped) await client.query('SELECT pg_backup_stop(false)').catch(() => {});
    await client.query('SELECT pg_drop_replication_slot($1)', [`ldp_backup_${process.pid}`]).catch(() => {});
  }
}

// --- Backup --------------------------------------------------------------------------------------

export interface BackupOptions {
  /** The backup directory: created, or empty. */
  out: string;
  databaseUrl: string;
  /** The embedded cluster's directory (<DATA_DIR>/postgres) when the database is the embedded default; else pg_dump. */
  clusterDir?: string;
  storage: ObjectStorage;
  /** <DATA_DIR>/keys */
  keysDir: string;
  /** <DATA_DIR>/search-index: its files are copied before the database (absent: none). */
  searchIndexDir?: string;
  /** Key variables set in the environment (their keys are not in DATA_DIR/keys, nor in the backup). */
  keysFromEnvironment: string[];
  /** The PII key in force (base64), for its fingerprint. */
  piiKey?: string;
  platformVersion: string;
  /** bin directory of pg_dump (else searched for). */
  pgBinDir?: string;
  log?: (line: string) => void;
}

/**
 * Copies the files of `dir` (not its subdirectories, nor `*.tmp`: a file being written at this
 * moment, lib/platform/secrets.ts and the search index's save) into `out/prefix/`.
 * @returns the names copied (none when `dir` is absent)
 */
async function copyDir(dir: string, out: string, prefix: string, files: BackupFile[]): Promise<string[]> {
  const names = (await readdir(dir).catch((err) => (missing(err) ? [] : Promise.reject(err))))
    .filter((name) => SEGMENT.test(name) && !name.endsWith('.tmp')).sort();
  const copied = [];
  for (const name of names) {
    if (!(await stat(path.join(dir, name))).isFile()) continue;
    await writeTracked(out, `${prefix}/${name}`, createReadStream(path.join(dir, name)), files);
    copied.push(name);
  }
  return copied;
}

/** True when `dir` is absent or an empty directory. */
async function emptyOrAbsent(dir: string): Promise<boolean> {
  return readdir(dir).then((names) => names.length === 0, (err) => {
    if (missing(err)) return true;
    throw err;
  });
}

/**
 * Refuses a backup directory that is not new or empty, or that lies inside what is copied.
 * @throws BackupError
 */
export async function assertBackupOut(out: string, copied: string[] = []): Promise<void> {
  const inside = copied.find((dir) => {
    const rel = path.relative(dir, out);
    return rel !== '..' && !rel.startsWith(`..${path.sep}`) && !path.isAbsolute(rel);
  });
  if (inside) throw new BackupError(`${out} is inside ${inside}, which the backup copies: choose a directory elsewhere`);
  if (!(await emptyOrAbsent(out))) throw new BackupError(`${out} is not empty: a backup goes into a new or empty directory`);
}

/**
 * Writes a backup of the instance into `options.out`: the database, then the objects, then the
 * keys, then the manifest. On failure `out` is left empty.
 * @throws BackupError when `out` is not empty, no matching pg_dump is found or PostgreSQL refuses
 */
export async function createBackup(options: BackupOptions): Promise<BackupManifest> {
  await assertBackupOut(options.out);
  await mkdirPrivate(options.out);
  try {
    return await writeBackup(options);
  } catch (err) {
    // `out` was new or empty: leave it so, not holding half a backup.
    for (const name of await readdir(options.out).catch(() => [] as string[])) await rm(path.join(options.out, name), { recursive: true, force: true });
    throw err;
  }
}

async function writeBackup(options: BackupOptions): Promise<BackupManifest> {
  const { out, log = () => {} } = options;
  const files: BackupFile[] = [];
  const indexFiles = options.searchIndexDir ? await copyDir(options.searchIndexDir, out, SEARCH_INDEX_DIR, files) : [];
  if (indexFiles.length) log(`search index: ${indexFiles.join(', ')}`);
  const client = new pg.Client({ connectionString: options.databaseUrl, application_name: 'ldp-backup' });
  await client.connect();
  let facts;
  let database: BackupManifest['database'];
  try {
    facts = await databaseFacts(client);
    if (options.clusterDir) {
      const directories = await baseBackup(client, options.clusterDir, out, files);
      database = { method: 'base-backup', directories };
    } else {
      const tool = await findPgTool('pg_dump', facts.major, options.pgBinDir);
      const file = path.join(out, DUMP_FILE);
      await mkdirPrivate(path.dirname(file));
      // One snapshot for the whole dump (pg_dump's own): consistent while the platform runs.
      await runPgTool(tool, ['--format=custom', `--file=${file}`], options.databaseUrl);
      await chmod(file, PRIVATE_FILE_MODE);
      files.push({ path: DUMP_FILE, ...(await hashFile(file)) });
      database = { method: 'pg_dump', tool: tool.version };
    }
  } finally {
    await client.end().catch(() => {});
  }
  const dbBytes = files.reduce((n, f) => n + f.size, 0);
  log(`database: ${database.method === 'pg_dump' ? `pg_dump of PostgreSQL ${facts.server_version}` : `base backup of ${options.clusterDir}`} (${files.length} files, ${(dbBytes / 1e6).toFixed(1)} MB)`);

  let count = 0;
  let bytes = 0;
  for await (const object of options.storage.list()) {
    const body = await options.storage.get(object.key).catch((err) => (err?.name === 'ObjectNotFoundError' ? null : Promise.reject(err)));
    if (!body) continue; // deleted since it was listed
    await writeTracked(out, `objects/${object.key}`, body, files);
    count += 1;
    bytes += files.at(-1)!.size;
  }
  log(`objects: ${count} (${(bytes / 1e6).toFixed(1)} MB) from ${options.storage.location}`);

  const keyNames = await copyDir(options.keysDir, out, 'keys', files);
  const fromEnv = options.keysFromEnvironment.length ? `; not in it, as set in the environment: ${options.keysFromEnvironment.join(', ')}` : '';
  log(`keys: ${keyNames.join(', ') || 'none'}${fromEnv}`);

  const manifest: BackupManifest = {
    format: BACKUP_FORMAT,
    created_at: new Date().toISOString(),
    platform: { version: options.platformVersion },
    postgres: { server_version: facts.server_version, major: facts.major },
    migration_version: facts.migration_version,
    database,
    objects: { source: options.storage.location, count, bytes },
    keys: { from_environment: options.keysFromEnvironment, pii_key_sha256: options.piiKey ? piiKeyFingerprint(options.piiKey) : null },
    files,
  };
  await writeFile(path.join(out, MANIFEST), `${JSON.stringify(manifest, null, 2)}\n`, { mode: PRIVATE_FILE_MODE });
  return manifest;
}

// --- Restore -------------------------------------------------------------------------------------

/**
 * Reads `<dir>/manifest.json` and checks it (format, paths).
 * @throws BackupError when it is missing or malformed
 */
export async function readManifest(dir: string): Promise<BackupManifest> {
  let text: string;
  try {
    text = await readFile(path.join(dir, MANIFEST), 'utf8');
  } catch (err) {
    if (missing(err)) throw new BackupError(`${dir} holds no ${MANIFEST}: not a backup, or one that did not finish`);
    throw err;
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    throw new BackupError(`${path.join(dir, MANIFEST)} is not JSON`);
  }
  const parsed = manifestSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new BackupError(`${path.join(dir, MANIFEST)} is not a manifest of ${BACKUP_FORMAT}: ${issue.path.join('.') || '(root)'}: ${issue.message}`);
  }
  return parsed.data;
}

/**
 * Checks every file of the manifest against its size and SHA-256.
 * @throws BackupError naming the first missing or corrupted file
 */
export async function verifyBackup(dir: string, manifest: BackupManifest): Promise<void> {
  for (const entry of manifest.files) {
    const file = path.join(dir, entry.path);
    const actual = await hashFile(file).catch((err) => {
      if (missing(err)) throw new BackupError(`the backup is incomplete: ${entry.path} is missing`);
      throw err;
    });
    if (actual.size !== entry.size || actual.sha256 !== entry.sha256) {
      throw new BackupError(`the backup is corrupted: ${entry.path} does not match the manifest (sha256 ${actual.sha256}, ${actual.size} bytes; expected ${entry.sha256}, ${entry.size} bytes)`);
    }
  }
}

export interface RestoreTarget {
  dataDir: string;
  /** An empty database to restore a pg_dump backup into; unset: the embedded default in dataDir. */
  databaseUrl?: string;
  storage: ObjectStorage;
  /** Port of the embedded server started to restore into (a base backup). */
  embeddedPort: number;
}

/**
 * What makes the target not empty, or that the backup cannot go there (empty: it can).
 * Not empty: a cluster, keys, a search index or objects in DATA_DIR (or objects in the bucket), or tables in the
 * database of DATABASE_URL.
 */
export async function targetProblems(manifest: BackupManifest, target: RestoreTarget): Promise<string[]> {
  const problems: string[] = [];
  if (manifest.database.method === 'base-backup' && target.databaseUrl) {
    problems.push('this backup holds the embedded database (a base backup): restore it without DATABASE_URL, into a fresh DATA_DIR');
  }
  if (manifest.database.method === 'pg_dump' && !target.databaseUrl) {
    problems.push('this backup holds a pg_dump of a PostgreSQL server: restore it with DATABASE_URL naming an empty database');
  }
  const dirs = target.databaseUrl ? ['keys', SEARCH_INDEX_DIR] : ['postgres', 'keys', SEARCH_INDEX_DIR];
  for (const name of dirs) {
    if (!(await emptyOrAbsent(path.join(target.dataDir, name)))) problems.push(`${path.join(target.dataDir, name)} is not empty`);
  }
  for await (const object of target.storage.list()) {
    problems.push(`the object storage (${target.storage.location}) is not empty: it holds ${object.key}`);
    break;
  }
  if (target.databaseUrl) {
    const client = new pg.Client({ connectionString: target.databaseUrl });
    await client.connect();
    try {
      const { rows } = await client.query<{ name: string }>(
        `SELECT n.nspname || '.' || c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_toast%'
          ORDER BY 1 LIMIT 3`);
      if (rows.length) problems.push(`the database of DATABASE_URL is not empty: it has tables (${rows.map((r) => r.name).join(', ')}…)`);
    } finally {
      await client.end();
    }
  }
  const latest = Math.max(0, ...(await listMigrations()).map((m) => m.version));
  if ((manifest.migration_version ?? 0) > latest) {
    problems.push(`this backup was made by a newer version of the platform (migration ${manifest.migration_version}; this one knows up to ${latest}): restore it with that version or a newer one`);
  }
  return problems;
}

/** Chowns `dir` and everything below it (as root: the cluster belongs to the postgres user). */
async function chownTree(dir: string, uid: number, gid: number): Promise<void> {
  await lchown(dir, uid, gid);
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const child = path.join(dir, entry.name);
    if (entry.isDirectory()) await chownTree(child, uid, gid);
    else await lchown(child, uid, gid);
  }
}

/** The manifest's files under `prefix/` (path without the prefix), in manifest order. */
const filesUnder = (manifest: BackupManifest, prefix: string) =>
  manifest.files.filter((f) => f.path.startsWith(`${prefix}/`)).map((f) => ({ ...f, rel: f.path.slice(prefix.length + 1) }));

/**
 * Restores a verified backup (readManifest, verifyBackup) into an empty target (targetProblems):
 * the keys, the search index's files, the objects, the database (a base backup started once, replaying its WAL; a dump
 * through pg_restore in one transaction, then ANALYZE), then the pending migrations. On failure, what it wrote
 * into DATA_DIR and the object storage is removed again.
 * @throws BackupError when PostgreSQL or pg_restore refuses
 */
export async function restoreBackup(dir: string, manifest: BackupManifest, target: RestoreTarget,
  options: { pgBinDir?: string; log?: (line: string) => void } = {}): Promise<{ migrationsApplied: string[] }> {
  const log = options.log ?? (() => {});
  const written: string[] = [];
  const objectKeys: string[] = [];
  try {
    await mkdir(target.dataDir, { recursive: true });
    const keysDir = path.join(target.dataDir, 'keys');
    written.push(keysDir);
    await mkdirPrivate(keysDir);
    const keys = filesUnder(manifest, 'keys');
    for (const key of keys) {
      await writeFile(path.join(keysDir, key.rel), await readFile(path.join(dir, key.path)), { mode: PRIVATE_FILE_MODE });
    }
    log(`keys: ${keys.map((k) => k.rel).join(', ') || 'none'}`);

    const indexFiles = filesUnder(manifest, SEARCH_INDEX_DIR);
    if (indexFiles.length) {
      const indexDir = path.join(target.dataDir, SEARCH_INDEX_DIR);
      written.push(indexDir);
      await mkdirPrivate(indexDir);
      for (const file of indexFiles) await pipeline(createReadStream(path.join(dir, file.path)), createWriteStream(path.join(indexDir, file.rel), { mode: PRIVATE_FILE_MODE }));
      log(`search index: ${indexFiles.map((f) => f.rel).join(', ')}`);
    }

    const objects = filesUnder(manifest, 'objects');
    for (const object of objects) {
      objectKeys.push(object.rel);
      await target.storage.put(object.rel, createReadStream(path.join(dir, object.path)));
    }
    log(`objects: ${objects.length} into ${target.storage.location}`);

    let url = target.databaseUrl;
    let stop = async () => {};
    if (manifest.database.method === 'base-backup') {
      const clusterDir = path.join(target.dataDir, 'postgres');
      written.push(clusterDir);
      await mkdir(clusterDir, { mode: PRIVATE_DIR_MODE });
      for (const sub of manifest.database.directories ?? []) await mkdir(path.join(clusterDir, sub), { recursive: true, mode: PRIVATE_DIR_MODE });
      for (const file of filesUnder(manifest, CLUSTER_DIR)) {
        await pipeline(createReadStream(path.join(dir, file.path)), createWriteStream(path.join(clusterDir, file.rel), { mode: PRIVATE_FILE_MODE }));
      }
      const user = await clusterUser();
      if (user.uid !== undefined) await chownTree(clusterDir, user.uid, user.gid!);
      // The first start replays the backup's WAL (backup_label), then the cluster is consistent.
      const embedded = await startEmbeddedPostgres({ dataDir: target.dataDir, port: target.embeddedPort, log });
      url = embedded.url;
      stop = embedded.stop;
      log(`database: the base backup started as PostgreSQL in ${clusterDir}`);
    } else {
      const tool = await findPgTool('pg_restore', manifest.postgres.major, options.pgBinDir);
      await runPgTool(tool, ['--exit-on-error', '--single-transaction', '--no-owner', '--no-privileges', path.join(dir, DUMP_FILE)], url!);
      log(`database: restored with ${tool.version}`);
    }
    try {
      const pool = createPool(url!, 2);
      try {
        const migrationsApplied = await migrate(pool);
        if (manifest.database.method === 'pg_dump') {
          // A dump holds no planner statistics (a base backup does): without them search judges
          // how many rows a condition passes from nothing until autovacuum's ANALYZE (estimated
          // totals, plans), so the restored database answers differently for a while.
          await pool.query('ANALYZE');
          log('database: analyzed (a dump holds no planner statistics)');
        }
        return { migrationsApplied };
      } finally {
        await pool.end();
      }
    } finally {
      await stop();
    }
  } catch (err) {
    for (const key of objectKeys) await target.storage.delete(key).catch(() => {});
    for (const d of written) await rm(d, { recursive: true, force: true }).catch(() => {});
    throw err;
  }
}
