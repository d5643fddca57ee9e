/**
 * Starting the platform's parts in one process: migrations, the context, the internal API key,
 * the worker and any of the three services. Used by `ldp start`, `ldp serve`, `ldp worker` and by
 * the tests, so all of them run the same start-up path.
 */
import { once } from 'node:events';
import { MessageChannel, Worker } from 'node:worker_threads';
import { registerApiKey } from '../lib/platform/api-keys.ts';
import type { Config } from '../lib/platform/config.ts';
import { createContext, type PlatformContext } from '../lib/context.ts';
import type { Logger } from '../lib/platform/logger.ts';
import type { Metrics, MetricsSnapshot } from '../lib/platform/metrics.ts';
import { migrate } from '../lib/platform/migrate.ts';
import type { RunningService } from '../api/server.ts';
import type { WorkerPort } from '../api/http/worker-app.ts';
import type { ServiceName } from '../api/http/service-app.ts';
import { limitHeapGrowth, startWorker, type WorkerHandle } from '../workers/runner.ts';

export interface PlatformHandle {
  ctx: PlatformContext;
  services: RunningService[];
  worker?: WorkerHandle;
  /** The worker when it runs in a thread of this process (`worker: 'thread'`). */
  workerThread?: { stop(): Promise<void> };
  /** `/health` and `/metrics` of a process that is only a worker (`ldp worker`): WORKER_METRICS_PORT. */
  workerPort?: WorkerPort;
  /**
   * Lets running jobs finish within SHUTDOWN_TIMEOUT_MS (taking no new ones), then stops taking
   * requests, then closes the pool. The worker stops first because its jobs call the services (a
   * bulk chunk pushes to signals, reconciliation reads signals' feed): closed services would fail them.
   */
  stop(): Promise<void>;
}

export interface PlatformParts {
  services: ServiceName[];
  /**
   * Run a graphile-worker runner: `true` on this thread's event loop (tests, `ldp worker`; with no
   * service, the process serves `/health` and `/metrics` on WORKER_METRICS_PORT), `'thread'` in a
   * worker thread of this process, started after the services (`ldp start`), its metrics served
   * on the services' ports.
   */
  worker: boolean | 'thread';
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
  let workerThread: { stop(): Promise<void> } | undefined;
  let workerPort: WorkerPort | undefined;
  const stop = async () => {
    await worker?.stop();
    await workerThread?.stop();
    await Promise.all([...services.map((s) => s.close()), workerPort?.close()]);
    await ctx.close();
  };
  try {
    const applied = await migrate(ctx.pool);
    if (applied.length) logger.info({ applied }, 'migrations applied');
    for (const service of ['signals', 'search'] as const) await registerApiKey(ctx.pool, service, 'internal', ctx.internalApiKey);
    // A process that is only a worker (`ldp worker`) bounds its heap's growth; where services share
    // the process, the process-wide flag would cost them CPU (workers/runner.ts limitHeapGrowth).
    if (parts.worker === true && parts.services.length === 0) {
      limitHeapGrowth();
      // Its metrics have no service port to be served on: it gets one of its own.
      const { startWorkerPort } = await import('../api/http/worker-app.ts');
      workerPort = await startWorkerPort(ctx, config.WORKER_METRICS_HOST, config.WORKER_METRICS_PORT);
    }
    if (parts.worker === true) worker = await startWorker(ctx);
    const defaults = { signals: config.SIGNALS_PORT, aggregator: config.AGGREGATOR_PORT, search: config.SEARCH_PORT };
    if (parts.services.length) {
      // The services' modules (Express, every route) are loaded only by a process that runs one.
      const { startService } = await import('../api/server.ts');
      for (const name of parts.services) services.push(await startService(ctx, name, parts.ports?.[name] ?? defaults[name]));
    }
    if (parts.worker === 'thread') workerThread = await startWorkerThread(databaseUrl, ctx.urls, ctx.metrics);
  } catch (err) {
    await stop().catch(() => {});
    throw err;
  }
  return { ctx, services, worker, workerThread, workerPort, stop };
}

/**
 * Starts the worker in a thread (bin/worker-thread.ts) and resolves once its runner runs; its
 * metrics (jobs) join `metrics`, this thread's, at each scrape; its `stop` lets running jobs finish
 * as `ldp worker` does, then ends the thread.
 * @throws Error with the thread's start-up error
 */
async function startWorkerThread(databaseUrl: string, urls: PlatformContext['urls'], metrics: Metrics): Promise<{ stop(): Promise<void> }> {
  const thread = new Worker(new URL('./worker-thread.js', import.meta.url), { workerData: { databaseUrl, urls: { ...urls } } });
  const [first] = await Promise.race([once(thread, 'message'), once(thread, 'error').then(([err]) => [{ error: String(err) }])]);
  if (first !== 'ready') {
    await thread.terminate();
    throw new Error(`the worker thread did not start: ${(first as { error: string }).error}`);
  }
  let exited = false;
  thread.once('exit', () => { exited = true; });
  metrics.include(() => (exited ? Promise.resolve([]) : threadMetrics(thread)));
  let stopping: Promise<void> | undefined;
  return {
    stop() {
      stopping ??= (async () => {
        const stopped = once(thread, 'exit');
        thread.postMessage('stop');
        await stopped;
      })();
      return stopping;
    },
  };
}

/** How long a scrape waits for the worker thread's metrics (it may be in a CPU-bound stretch of a job). */
const THREAD_METRICS_TIMEOUT_MS = 3000;

/**
 * The worker thread's metrics snapshot, asked for on a port of its own (so concurrent scrapes get
 * their own answers); none when it does not answer within THREAD_METRICS_TIMEOUT_MS, so a scrape
 * still answers, without the thread's series that once.
 */
function threadMetrics(thread: Worker): Promise<MetricsSnapshot> {
  const { port1, port2 } = new MessageChannel();
  return new Promise((resolve) => {
    const done = (snapshot: MetricsSnapshot) => {
      clearTimeout(timer);
      port1.close();
      resolve(snapshot);
    };
    const timer = setTimeout(() => done([]), THREAD_METRICS_TIMEOUT_MS);
    port1.once('message', done);
    thread.postMessage({ metrics: port2 }, [port2]);
  });
}
