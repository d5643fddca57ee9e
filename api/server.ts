/** Starting and stopping the HTTP services. */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Express } from 'express';
import type { PlatformContext } from '../lib/context.ts';
import type { Network } from '../lib/network/config.ts';
import { aggregatorServiceRouteDocs, createAggregatorApp } from './aggregator/app.ts';
import type { RouteDoc } from './http/route-doc.ts';
import { createSearchApp, searchServiceRouteDocs } from './search/app.ts';
import type { ServiceName } from './service-names.ts';
import { createSignalsApp, signalsServiceRouteDocs } from './signals/app.ts';

export { SERVICES } from './service-names.ts';

const factories: Record<ServiceName, (ctx: PlatformContext) => Express> = {
  signals: createSignalsApp,
  aggregator: createAggregatorApp,
  search: createSearchApp,
};

/** The documented routes of each service (its OpenAPI document: api/http/openapi.ts). */
export const serviceRouteDocs: Record<ServiceName, (network: Network) => RouteDoc[]> = {
  signals: signalsServiceRouteDocs,
  aggregator: aggregatorServiceRouteDocs,
  search: searchServiceRouteDocs,
};

export interface RunningService {
  name: ServiceName;
  url: string;
  server: Server;
  /** Stops accepting connections and waits (up to `graceMs`) for in-flight requests to end. */
  close(graceMs?: number): Promise<void>;
}

/**
 * Starts `name` on HOST and `port` (0 lets the OS choose) and records its URL in `ctx.urls`.
 * @throws Error when the port cannot be bound (e.g. already in use).
 */
export async function startService(ctx: PlatformContext, name: ServiceName, port: number): Promise<RunningService> {
  const app = factories[name](ctx);
  const server = await new Promise<Server>((resolve, reject) => {
    const s = app.listen(port, ctx.config.HOST, (err?: Error) => (err ? reject(err) : resolve(s)));
    s.once('error', reject);
  });
  const { port: bound } = server.address() as AddressInfo;
  const host = ctx.config.HOST.includes(':') ? `[${ctx.config.HOST}]` : ctx.config.HOST;
  const url = `http://${host}:${bound}`;
  const configured = { signals: ctx.config.SIGNALS_URL, search: ctx.config.SEARCH_URL, aggregator: ctx.config.AGGREGATOR_PUBLIC_URL }[name];
  if (!configured) ctx.urls[name] = url;
  return {
    name, url, server,
    close: (graceMs = 10_000) => new Promise<void>((resolve) => {
      const force = setTimeout(() => server.closeAllConnections(), graceMs).unref();
      server.close(() => {
        clearTimeout(force);
        resolve();
      });
      server.closeIdleConnections();
    }),
  };
}
