/**
 * Which database an `ldp` command uses: DATABASE_URL when set; else the embedded database of the
 * instance `ldp start` is running (or starting) from DATA_DIR; else the embedded database in
 * DATA_DIR, started for this command (initialised on first use) and stopped again when it is
 * done, one process at a time.
 */
import type { Config } from '../lib/platform/config.ts';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../lib/platform/embedded-postgres.ts';
import { openInstance, readInstance, releaseInstance } from '../lib/platform/instance.ts';
import type { Logger } from '../lib/platform/logger.ts';

export interface DatabaseHandle {
  url: string;
  /** Set when this process started the embedded server (and must stop it). */
  embedded?: EmbeddedPostgres;
  release(): Promise<void>;
}

/**
 * Opens the database for a command. Without DATABASE_URL, the process claims DATA_DIR's embedded
 * database first (lib/platform/instance.ts): it uses the database of a running `ldp start`
 * (waiting for it while that starts), or starts the server for itself once no other process
 * holds it (waiting while one does). `use`: `start` (`ldp start`) refuses to share DATA_DIR with
 * another `ldp start`; `part` (`ldp serve`, `ldp worker`) runs only beside one (README, "The
 * `ldp` command"): a part holding a server of its own would keep every other process from it for
 * its whole life, and stop it under them. `release` stops a server started here, then lets go of
 * the claim.
 * @throws Error when another `ldp start` runs from DATA_DIR (start), none does (part), the claim
 *   stays held for 120 s, or PostgreSQL does not start.
 */
export async function openDatabase(config: Config, logger: Logger, use: 'start' | 'part' | 'command' = 'command'): Promise<DatabaseHandle> {
  if (config.DATABASE_URL) return { url: config.DATABASE_URL, release: async () => {} };
  const dataDir = config.dataDirPath;
  if (use === 'part') {
    const running = await readInstance(dataDir);
    if (!running) {
      throw new Error(`ldp serve and ldp worker need DATABASE_URL, or \`ldp start\` running from DATA_DIR (${dataDir}): `
        + 'neither is there. Start the platform with `ldp start` and add parts beside it, or set DATABASE_URL');
    }
    return { url: running.database_url, release: async () => {} };
  }
  const log = logger.child({ component: 'embedded-postgres' });
  const running = await openInstance(dataDir, use === 'start' ? 'platform' : 'command', {
    onWait: (pid) => log.warn({ pid }, `waiting for the ldp process ${pid}, which holds the embedded database of ${dataDir}`),
  });
  if (running) return { url: running.database_url, release: async () => {} };
  const embedded = await startEmbeddedPostgres({ dataDir, port: config.EMBEDDED_POSTGRES_PORT, log: (line) => log.info(line) })
    .catch(async (err) => {
      await releaseInstance(dataDir, 'stopped');
      throw err;
    });
  log.info({ port: embedded.port, dataDir: embedded.dataDir }, 'embedded PostgreSQL started');
  return {
    url: embedded.url,
    embedded,
    release: async () => {
      await releaseInstance(dataDir, 'stopping');
      try {
        await embedded.stop();
      } finally {
        await releaseInstance(dataDir, 'stopped');
      }
    },
  };
}
