/**
 * Which database an `ldp` command uses: DATABASE_URL when set; else the embedded database of the
 * instance `ldp start` is running (or starting) from DATA_DIR; else the embedded database in
 * DATA_DIR, started for this command (initialised on first use) and stopped again when it is done.
 */
import type { Config } from '../lib/platform/config.ts';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../lib/platform/embedded-postgres.ts';
import { claimInstance, readInstance, removeInstance } from '../lib/platform/instance.ts';
import type { Logger } from '../lib/platform/logger.ts';

export interface DatabaseHandle {
  url: string;
  /** Set when this process started the embedded server (and must stop it). */
  embedded?: EmbeddedPostgres;
  release(): Promise<void>;
}

/**
 * Opens the database for a command. `owner` commands (`ldp start`) claim DATA_DIR before they
 * start its database (lib/platform/instance.ts) and refuse to share it; the others wait for the
 * database of an instance that is starting.
 * @throws Error when another live process owns DATA_DIR (owner), or PostgreSQL does not start.
 */
export async function openDatabase(config: Config, logger: Logger, options: { owner?: boolean } = {}): Promise<DatabaseHandle> {
  if (config.DATABASE_URL) return { url: config.DATABASE_URL, release: async () => {} };
  if (options.owner) await claimInstance(config.dataDirPath);
  else {
    const running = await readInstance(config.dataDirPath);
    if (running) return { url: running.database_url, release: async () => {} };
  }
  const log = logger.child({ component: 'embedded-postgres' });
  const embedded = await startEmbeddedPostgres({
    dataDir: config.dataDirPath, port: config.EMBEDDED_POSTGRES_PORT, log: (line) => log.info(line),
  }).catch(async (err) => {
    if (options.owner) await removeInstance(config.dataDirPath);
    throw err;
  });
  log.info({ port: embedded.port, dataDir: embedded.dataDir }, 'embedded PostgreSQL started');
  return { url: embedded.url, embedded, release: () => embedded.stop() };
}
