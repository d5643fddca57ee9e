/**
 * `ldp backup --out DIR` and `ldp restore DIR`: a consistent copy of the instance of DATA_DIR (or
 * of DATABASE_URL), and its restore into a fresh DATA_DIR or an empty database
 * (lib/platform/backup.ts; docs/operations.md, "Backup and restore").
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { Config } from '../../lib/platform/config.ts';
import {
  assertBackupOut, BackupError, createBackup, piiKeyFingerprint, readManifest, restoreBackup, targetProblems, verifyBackup,
} from '../../lib/platform/backup.ts';
import { createStorage } from '../../lib/platform/storage.ts';
import { CliError, cliConfig } from '../command-context.ts';
import { openDatabase } from '../database.ts';

/** Variables that, when set, give a key that is otherwise generated into DATA_DIR/keys. */
const KEY_VARIABLES = ['PII_KEY', 'JWT_PRIVATE_KEY', 'INTERNAL_API_KEY', 'REVIEW_LINK_SECRET', 'VOICE_PROVIDER_SECRET'] as const;

const keysFromEnvironment = (config: Config) => KEY_VARIABLES.filter((name) => config[name] !== undefined);

async function platformVersion(): Promise<string> {
  const pkg = JSON.parse(await readFile(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
  return pkg.version;
}

/** Runs `fn`, reporting a BackupError as the CLI's own error (message, no stack). */
async function cli<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof BackupError) throw new CliError(err.message);
    throw err;
  }
}

const say = (line: string) => process.stdout.write(`${line}\n`);

/**
 * Writes a backup of the instance into `opts.out`: the running instance of DATA_DIR, or its
 * embedded database started for this command, or DATABASE_URL with a pg_dump of its version.
 */
export async function backup(opts: { out: string; pgBin?: string }): Promise<void> {
  const { config, logger } = cliConfig();
  const out = path.resolve(opts.out);
  await cli(async () => {
    const clusterDir = config.DATABASE_URL ? undefined : path.join(config.dataDirPath, 'postgres');
    if (clusterDir && !existsSync(path.join(clusterDir, 'PG_VERSION'))) {
      throw new CliError(`there is no instance in ${config.dataDirPath} (no ${clusterDir}): set DATA_DIR to the instance's, or DATABASE_URL for a server`);
    }
    const searchIndexDir = path.join(config.dataDirPath, 'search-index');
    await assertBackupOut(out, [clusterDir, config.S3_ENDPOINT ? undefined : path.join(config.dataDirPath, 'objects'), path.join(config.dataDirPath, 'keys'), searchIndexDir]
      .filter((dir): dir is string => dir !== undefined));
    const db = await openDatabase(config, logger);
    try {
      const keysDir = path.join(config.dataDirPath, 'keys');
      const piiKey = config.PII_KEY ?? await readFile(path.join(keysDir, 'pii.key'), 'utf8').catch(() => undefined);
      const manifest = await createBackup({
        out, databaseUrl: db.url, clusterDir,
        storage: await createStorage(config), keysDir, searchIndexDir, keysFromEnvironment: keysFromEnvironment(config), piiKey,
        platformVersion: await platformVersion(), pgBinDir: opts.pgBin, log: say,
      });
      say(`backup of PostgreSQL ${manifest.postgres.server_version}, migration ${manifest.migration_version}, ${manifest.files.length} files written to ${out}`);
    } finally {
      await db.release();
    }
  });
}

/**
 * Restores the backup in `dir` into DATA_DIR (and DATABASE_URL's empty database when the backup
 * is a pg_dump): refuses a target that is not empty, a different PII key, or a file that does not
 * match the manifest, before writing anything.
 */
export async function restore(dir: string, opts: { pgBin?: string }): Promise<void> {
  const { config } = cliConfig();
  const source = path.resolve(dir);
  await cli(async () => {
    const manifest = await readManifest(source);
    const target = {
      dataDir: config.dataDirPath, databaseUrl: config.DATABASE_URL, storage: await createStorage(config),
      embeddedPort: config.EMBEDDED_POSTGRES_PORT,
    };
    const problems = await targetProblems(manifest, target);
    if (problems.length) throw new CliError(`cannot restore into this target:\n  ${problems.join('\n  ')}`);
    say(`verifying ${manifest.files.length} files against ${path.join(source, 'manifest.json')}`);
    await verifyBackup(source, manifest);
    await checkPiiKey(config, source, manifest.keys.pii_key_sha256);
    const { migrationsApplied } = await restoreBackup(source, manifest, target, { pgBinDir: opts.pgBin, log: say });
    if (migrationsApplied.length) say(`migrations applied: ${migrationsApplied.join(', ')}`);
    for (const name of manifest.keys.from_environment) say(`note: ${name} was set in the environment when the backup was made and is not in it: set the same ${name} here`);
    say(`restored the backup of ${manifest.created_at} into ${config.dataDirPath}${config.DATABASE_URL ? ' and DATABASE_URL' : ''}; start it with \`ldp start\``);
  });
}

/**
 * Refuses a restore whose PII key in force would differ from the backup's: nothing would decrypt.
 * The key in force is PII_KEY when set, else the backup's keys/pii.key.
 */
async function checkPiiKey(config: Config, source: string, expected: string | null): Promise<void> {
  if (!expected) return;
  const key = config.PII_KEY ?? await readFile(path.join(source, 'keys', 'pii.key'), 'utf8').catch(() => undefined);
  if (!key) throw new CliError('the backup was made with PII_KEY set in the environment: set the same PII_KEY to restore it (without it nothing decrypts)');
  if (piiKeyFingerprint(key) !== expected) {
    throw new CliError(`the PII key in force (${config.PII_KEY ? 'PII_KEY' : 'the backup\'s keys/pii.key'}) is not the one the backup was made with: nothing would decrypt`);
  }
}
