/**
 * HTTP metrics: a request-duration observer for every route, and `GET /metrics` (Prometheus text
 * format). With METRICS_TOKEN set, every client must send `Authorization: Bearer METRICS_TOKEN`,
 * loopback ones too (behind a reverse proxy on the same host every client is loopback); unset, only
 * loopback clients are answered (docs/decisions.md, "Metrics and request ids" and "Metrics where
 * the work is"). Anyone else gets the 404 of an unknown route.
 */
import { timingSafeEqual } from 'node:crypto';
import type { RequestHandler } from 'express';
import { z } from 'zod';
import type { Metrics } from '../../lib/platform/metrics.ts';
import type { RouteDoc } from './route-doc.ts';

/**
 * Observes each request's duration under its route template (`/v1/links/:id`; `(unmatched)` when no
 * route matched) once the response is sent. The template is noted when Express sets `req.route`,
 * because `req.baseUrl` (the mount path) is reset once an error leaves the router.
 */
export function observeRequests(metrics: Metrics, service: string): RequestHandler {
  return (req, res, next) => {
    const end = metrics.httpRequestDuration.startTimer();
    let route: { path: unknown } | undefined;
    let template = '(unmatched)';
    Object.defineProperty(req, 'route', {
      configurable: true, enumerable: true,
      get: () => route,
      set(value: { path: unknown } | undefined) {
        route = value;
        if (value) template = `${req.baseUrl}${String(value.path)}`;
      },
    });
    res.once('finish', () => end({ service, method: req.method, route: template, status: String(res.statusCode) }));
    next();
  };
}

/** Whether `address` (as Node reports the peer) is a loopback address (127.0.0.0/8 or ::1). */
function isLoopback(address: string | undefined): boolean {
  if (!address) return false;
  const v4 = address.startsWith('::ffff:') ? address.slice(7) : address;
  return address === '::1' || /^127\.\d+\.\d+\.\d+$/.test(v4);
}

function tokenMatches(header: string | undefined, token: string): boolean {
  const match = /^Bearer\s+(\S+)$/i.exec(header ?? '');
  if (!match) return false;
  const given = Buffer.from(match[1]);
  const expected = Buffer.from(token);
  return given.length === expected.length && timingSafeEqual(given, expected);
}

/**
 * Whether a client at `remoteAddress` sending `authorization` may read the metrics: with a token
 * configured, any client sending `Bearer <token>` (and no other); without one, loopback clients.
 */
export function metricsAllowed(remoteAddress: string | undefined, authorization: string | undefined, token: string | undefined): boolean {
  return token ? tokenMatches(authorization, token) : isLoopback(remoteAddress);
}

/**
 * `GET /metrics`: the process's registry (with its worker thread's, `ldp start`), for clients
 * `metricsAllowed` lets in (else the 404 handler).
 */
export function metricsRoute(metrics: Metrics, token: string | undefined): RequestHandler {
  return async (req, res, next) => {
    if (!metricsAllowed(req.socket.remoteAddress, req.header('authorization'), token)) {
      next();
      return;
    }
    res.set('content-type', metrics.registry.contentType).send(await metrics.exposition());
  };
}

/** Docs of `metricsRoute` (api/http/openapi.ts). */
export const metricsRouteDocs: RouteDoc[] = [{
  method: 'GET', path: '/metrics', summary: 'Prometheus metrics of this process', tags: ['operations'], security: 'metricsToken',
  description: 'With METRICS_TOKEN set, every client (loopback included) needs `Authorization: Bearer $METRICS_TOKEN`; '
    + 'unset, only loopback clients are answered. Includes the worker thread\'s job metrics where the worker runs in this process.',
  responses: { 200: { description: 'Prometheus text exposition format', content: [{ type: 'text/plain', schema: z.string() }] } },
  errors: { 404: 'No valid METRICS_TOKEN (when one is set), or not a loopback client (when none is): answered as an unknown route' },
}];
