/**
 * Starting the platform's parts in one process: migrations, the context, the internal API key,
 * the worker and any of the three services. Used by `ldp start`, `ldp serve`, `ldp worker` and by
 * the tests, so all of them run the same start-up path.
 */
import { registerApiKey } from '../lib/platform/api-keys.ts';
import type { Config } from '../lib/platform/config.ts';
import { createContext, type PlatformContext } from '../lib/context.ts';
import type { Logger } from '../lib/platform/logger.ts';
import { migrate } from '../lib/platform/migrate.ts';
import { startService, type RunningService } from '../api/server.ts';
import type { ServiceName } from '../api/http/service-app.ts';
import { startWorker, type WorkerHandle } from '../workers/runner.ts';

export interface PlatformHandle {
  ctx: PlatformContext;
  services: RunningService[];
  worker?: WorkerHandle;
  /** Stops taking requests, lets running jobs finish within SHUTDOWN_TIMEOUT_MS, closes the pool. */
  stop(): Promise<void>;
}

export interface PlatformParts {
  services: ServiceName[];
  worker: boolean;
  /** Ports per service; default the configured ones (0 = any free port). */
  ports?: Partial<Record<ServiceName, number>>;
}

/**
 * Migrates `databaseUrl` and starts `parts` on it.
 * @throws ConfigError-like Errors from the network file, keys or ports; nothing is left running.
 */
export async function startPlatform(config: Config, logger: Logger, databaseUrl: string, parts: PlatformParts): Promise<PlatformHandle> {
  const ctx = await createContext(config, databaseUrl, logger);
  const services: RunningService[] = [];
  let worker: WorkerHandle | undefined;
  const stop = async () => {
    await Promise.all(services.map((s) => s.close()));
    await worker?.stop();
    await ctx.close();
  };
  try {
    const applied = await migrate(ctx.pool);
    if (applied.length) logger.info({ applied }, 'migrations applied');
    for (const service of ['signals', 'search'] as const) await registerApiKey(ctx.pool, service, 'internal', ctx.internalApiKey);
    if (parts.worker) worker = await startWorker(ctx);
    const defaults = { signals: config.SIGNALS_PORT, aggregator: config.AGGREGATOR_PORT, search: config.SEARCH_PORT };
    for (const name of parts.services) services.push(await startService(ctx, name, parts.ports?.[name] ?? defaults[name]));
  } catch (err) {
    await stop().catch(() => {});
    throw err;
  }
  return { ctx, services, worker, stop };
}
