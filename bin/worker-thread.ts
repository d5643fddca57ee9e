/**
 * The graphile-worker runner inside a worker thread of `ldp start` (issue 17): the bulk-upload
 * tasks (CSV parsing, coercion, encryption, JSON) then run on their own event loop and core, not
 * between the HTTP requests of the services on the main thread — signals' item pushes among them.
 * The thread builds its own context (pool, keys from DATA_DIR, metrics registry) from the parent's
 * environment, with the services' final URLs. Messages: parent → `stop` | `{metrics: MessagePort}`
 * (answered on that port with the thread's metrics snapshot, merged into the services' /metrics);
 * thread → `ready` | `stopped` | {error}.
 */
import { MessagePort, parentPort, workerData } from 'node:worker_threads';
import { createContext } from '../lib/context.ts';
import { loadConfig } from '../lib/platform/config.ts';
import { createLogger } from '../lib/platform/logger.ts';
import { startWorker } from '../workers/runner.ts';

const { databaseUrl, urls } = workerData as { databaseUrl: string; urls: { signals: string; search: string; aggregator: string } };
const config = loadConfig();
const logger = createLogger(config.LOG_LEVEL).child({ thread: 'worker' });
try {
  const ctx = await createContext(config, databaseUrl, logger, { thread: 'worker' });
  Object.assign(ctx.urls, urls);
  const worker = await startWorker(ctx);
  parentPort!.on('message', async (message) => {
    if (message?.metrics instanceof MessagePort) {
      const port: MessagePort = message.metrics;
      port.postMessage(await ctx.metrics.snapshot().catch((err: Error) => {
        logger.warn({ err }, 'could not read the worker thread\'s metrics');
        return [];
      }));
      port.close();
      return;
    }
    if (message !== 'stop') return;
    await worker.stop();
    await ctx.close();
    parentPort!.postMessage('stopped');
    parentPort!.close();
  });
  parentPort!.postMessage('ready');
} catch (err) {
  parentPort!.postMessage({ error: (err as Error).stack ?? String(err) });
}
