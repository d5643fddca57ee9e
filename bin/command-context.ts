/** What every `ldp` command starts from: the validated configuration, a logger, the database. */
import { ConfigError, loadConfig, type Config } from '../lib/platform/config.ts';
import { createContext, type PlatformContext } from '../lib/context.ts';
import { createLogger, type Logger } from '../lib/platform/logger.ts';
import { migrate } from '../lib/platform/migrate.ts';
import { openDatabase } from './database.ts';

/** An error the CLI reports as `ldp: <message>` with exit code 1, without a stack trace. */
export class CliError extends Error {
  name = 'CliError';
}

/** Loads the configuration. @throws CliError naming each invalid variable. */
export function cliConfig(): { config: Config; logger: Logger } {
  try {
    const config = loadConfig();
    return { config, logger: createLogger(config.LOG_LEVEL === 'info' ? 'warn' : config.LOG_LEVEL) };
  } catch (err) {
    if (err instanceof ConfigError) throw new CliError(err.message);
    throw err;
  }
}

/**
 * Runs `fn` with a platform context on the command's database (migrated first), then releases
 * everything, including an embedded server started only for this command.
 */
export async function withPlatformContext<T>(fn: (ctx: PlatformContext) => Promise<T>): Promise<T> {
  const { config, logger } = cliConfig();
  const db = await openDatabase(config, logger);
  try {
    const ctx = await createContext(config, db.url, logger);
    try {
      await migrate(ctx.pool);
      return await fn(ctx);
    } finally {
      await ctx.close();
    }
  } finally {
    await db.release();
  }
}
