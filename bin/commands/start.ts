/**
 * `ldp start` (everything in one process, on the embedded database when DATABASE_URL is unset),
 * `ldp serve --service NAMES` (some or all services, no worker) and `ldp worker` (the worker
 * alone), and their graceful stop on
 * SIGINT/SIGTERM: let running jobs finish within SHUTDOWN_TIMEOUT_MS, stop taking requests, close
 * the pool, stop the embedded PostgreSQL cleanly. A second signal exits at once.
 */
import { ConfigError, loadConfig, serviceUrls } from '../../lib/platform/config.ts';
import { writeInstance, type InstanceInfo } from '../../lib/platform/instance.ts';
import { createLogger } from '../../lib/platform/logger.ts';
import { SERVICES } from '../../api/service-names.ts';
import type { ServiceName } from '../../api/http/service-app.ts';
import { CliError } from '../command-context.ts';
import { openDatabase } from '../database.ts';
import { startPlatform, type PlatformParts } from '../platform.ts';

/** Runs `parts` until a signal arrives. `owner` marks `ldp start`, which records the instance. */
export async function runPlatform(parts: PlatformParts, owner: boolean): Promise<void> {
  let config;
  try {
    config = loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) throw new CliError(err.message);
    throw err;
  }
  const logger = createLogger(config.LOG_LEVEL);
  const started = Date.now();
  // Listen for signals from the start: one arriving while we start up (a supervisor's SIGTERM
  // right after launch) is answered by a clean stop once the parts are up, not by dying half-way.
  let onSignal = (signal: string) => {
    if (pending) process.exit(130);
    pending = signal;
  };
  let pending: string | undefined;
  process.on('SIGINT', () => onSignal('SIGINT'));
  process.on('SIGTERM', () => onSignal('SIGTERM'));
  const db = await openDatabase(config, logger, owner ? 'start' : 'part');
  // openDatabase claimed DATA_DIR before starting PostgreSQL; the database is recorded as soon as
  // it runs, so that an `ldp` command started meanwhile (while the platform migrates and starts)
  // uses it. Rewritten once the services listen, with their addresses.
  const record = (urls: InstanceInfo['urls']) => (owner && db.embedded
    ? writeInstance(config.dataDirPath, { pid: process.pid, database_url: db.url, urls, started_at: new Date(started).toISOString() })
    : Promise.resolve());
  await record(serviceUrls(config));
  let platform;
  try {
    // Everything in one process: the worker on its own thread, off the services' event loop (issue 17).
    platform = await startPlatform(config, logger, db.url, owner && parts.worker && parts.services.length ? { ...parts, worker: 'thread' } : parts);
  } catch (err) {
    await db.release().catch(() => {});
    throw err;
  }
  await record(platform.ctx.urls);
  for (const s of platform.services) process.stdout.write(`${s.name.padEnd(10)} ${s.url}\n`);
  if (platform.worker || platform.workerThread) {
    const port = platform.workerPort ? `, /health and /metrics on ${platform.workerPort.url}` : '';
    process.stdout.write(`worker     running (concurrency ${config.WORKER_CONCURRENCY})${port}\n`);
  }
  logger.info({ ms: Date.now() - started, database: db.embedded ? `embedded (${db.embedded.dataDir})` : 'DATABASE_URL' }, 'platform started');

  let stopping = false;
  const shutdown = async (signal: string) => {
    if (stopping) {
      logger.warn({ signal }, 'second signal: exiting now');
      process.exit(130);
    }
    stopping = true;
    logger.info({ signal }, 'stopping: waiting for running jobs, then no new requests');
    try {
      await platform.stop();
      // Stops the embedded server, then removes instance.json (its database out of it first).
      await db.release();
      logger.info('stopped cleanly');
      process.exit(0);
    } catch (err) {
      logger.error({ err }, 'error while stopping');
      process.exit(1);
    }
  };
  onSignal = (signal) => void shutdown(signal);
  if (pending) void shutdown(pending);
}

/**
 * Parses `--service` of `ldp serve` and `ldp health`: one name, a comma-separated list, or `all`.
 * @throws CliError on an unknown or missing name.
 */
export function parseServices(value: string): ServiceName[] {
  const names = value.trim() === 'all' ? SERVICES : value.split(',').map((s) => s.trim());
  const bad = names.find((name) => !SERVICES.includes(name as ServiceName));
  if (bad !== undefined || names.length === 0) {
    throw new CliError(`--service must be one of ${SERVICES.join(', ')}, a comma-separated list of them, or all`);
  }
  return [...new Set(names as ServiceName[])];
}
