/**
 * The HTTP port of a process that is only a worker (`ldp worker`): `GET /health` (liveness) and
 * `GET /metrics` (its jobs, the queue depth and its process metrics; METRICS_TOKEN as on the
 * services), nothing else. Its host and port are WORKER_METRICS_HOST and WORKER_METRICS_PORT.
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import type { PlatformContext } from '../../lib/context.ts';
import { errorBody, HttpError } from './errors.ts';
import { metricsRoute } from './metrics.ts';

export interface WorkerPort {
  /** Base URL it listens on, e.g. `http://127.0.0.1:3004`. */
  url: string;
  /** Stops listening; open connections (a scrape) are closed after a second. */
  close(): Promise<void>;
}

/**
 * Listens on `host`:`port` (0: any free port).
 * @throws Error naming WORKER_METRICS_PORT when the port cannot be bound (e.g. already in use).
 */
export async function startWorkerPort(ctx: PlatformContext, host: string, port: number): Promise<WorkerPort> {
  const app = express();
  app.disable('x-powered-by');
  app.get('/health', (_req, res) => {
    res.json({ status: 'ok', service: 'worker' });
  });
  app.get('/metrics', metricsRoute(ctx.metrics, ctx.config.METRICS_TOKEN));
  // Unknown routes, and /metrics refused, answer as the search service does (error shape A).
  app.use((req, res) => {
    res.status(404).json(errorBody('A', new HttpError(404, `No route for ${req.method} ${req.path}`), ''));
  });
  const server = await new Promise<Server>((resolve, reject) => {
    const s = app.listen(port, host, (err?: Error) => (err ? reject(err) : resolve(s)));
    s.once('error', reject);
  }).catch((err: Error) => {
    throw new Error(`WORKER_METRICS_PORT ${port} on WORKER_METRICS_HOST ${host}: ${err.message}`);
  });
  const { port: bound } = server.address() as AddressInfo;
  return {
    url: `http://${host.includes(':') ? `[${host}]` : host}:${bound}`,
    close: () => new Promise<void>((resolve) => {
      const force = setTimeout(() => server.closeAllConnections(), 1000).unref();
      server.close(() => {
        clearTimeout(force);
        resolve();
      });
      server.closeIdleConnections();
    }),
  };
}
