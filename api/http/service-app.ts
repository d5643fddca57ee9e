/**
 * The Express app every service starts from: request ids (also carried into the jobs a request
 * enqueues), structured request logs, request metrics and `GET /metrics`, the JSON body parser with
 * its size limit, and — added by `finish` — the 404 and error handlers that answer in
 * the service's error shape (a route may pick another shape through `res.locals.errorShape`).
 */
import { randomUUID } from 'node:crypto';
import express, { type ErrorRequestHandler, type Express, type RequestHandler } from 'express';
import { pinoHttp } from 'pino-http';
import type { PlatformContext } from '../../lib/context.ts';
import { requestForLog } from '../../lib/platform/logger.ts';
import { runWithRequestId } from '../../lib/platform/request-context.ts';
import type { ServiceName } from '../service-names.ts';
import { errorBody, HttpError, type ErrorShape } from './errors.ts';
import { metricsRoute, observeRequests } from './metrics.ts';
import { refuseNulInBody } from './validation.ts';

export type { ServiceName };

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;
const BODY_METHODS = new Set(['POST', 'PUT', 'PATCH']);
/** Server-rendered pages whose HTML forms post url-encoded bodies (registration form, review page), parsed by their routers. */
const HTML_FORM_PATHS = /^\/(r|review|console)\//;

export const JSON_TYPES = ['application/json', 'application/*+json'];

export interface ServiceAppOptions {
  /**
   * Exact paths (a trailing slash ignored) whose routes parse their own body with `routeBody`,
   * after authenticating the caller: those taking more than HTTP_BODY_LIMIT (support attachments,
   * voice jobs) or a raw body for a signature check. The app's JSON parser (HTTP_BODY_LIMIT) leaves
   * them alone, so a caller without credentials is answered before its body is read (Trust II).
   */
  ownBodyPaths?: string[];
}

/**
 * The body parser of a route on one of `ownBodyPaths`, followed by the NUL check every parsed
 * body gets: mount it after the route's authentication and role check.
 */
export function routeBody(parser: RequestHandler): RequestHandler[] {
  return [parser, refuseNul];
}

// The lookbehind starts a match only where a run of slashes begins: `(.)\/+$` retried every slash of a long run (quadratic).
const withoutTrailingSlash = (path: string) => path.replace(/(?<=^.|[^/])\/+$/, '');

/** Creates the app with the common middleware; add routes, then call `finishServiceApp`. */
export function createServiceApp(ctx: PlatformContext, service: ServiceName, options: ServiceAppOptions = {}): Express {
  const app = express();
  app.disable('x-powered-by');
  app.set('query parser', 'simple');
  app.locals.service = service;
  app.use(pinoHttp({
    logger: ctx.logger.child({ service }),
    genReqId(req, res) {
      const incoming = req.headers['x-request-id'];
      const id = typeof incoming === 'string' && REQUEST_ID.test(incoming) ? incoming : randomUUID();
      res.setHeader('x-request-id', id);
      return id;
    },
    customLogLevel: (_req, res, err) => (err || res.statusCode >= 500 ? 'error' : res.statusCode >= 400 ? 'info' : 'debug'),
    // Query strings can carry contacts: logged with their values redacted.
    serializers: { req: requestForLog },
  }));
  // Everything the request does (log lines, jobs it enqueues, calls to other services) knows its id.
  app.use((req, _res, next) => runWithRequestId(String(req.id), next));
  app.use(observeRequests(ctx.metrics, service));
  app.get('/metrics', metricsRoute(ctx.metrics, ctx.config.METRICS_TOKEN));
  app.use(requireKnownContentType);
  const json = express.json({ limit: ctx.config.HTTP_BODY_LIMIT, type: JSON_TYPES });
  const ownBody = new Set((options.ownBodyPaths ?? []).map(withoutTrailingSlash));
  app.use((req, res, next) => (ownBody.has(withoutTrailingSlash(req.path)) ? next() : json(req, res, next)));
  app.use(refuseNul);
  return app;
}

/**
 * 400 for a NUL character in the URL, the query or a JSON body (value or key), naming where:
 * no field takes one, and PostgreSQL cannot store one in text (it answered 500 before; issue 15's
 * schema fuzzer). Form and multipart bodies, and raw ones (a Buffer), are checked by the routes
 * that parse them (`hasNul`, `refuseNulInBody`).
 */
const refuseNul: RequestHandler = (req, _res, next) => {
  if (/%00/i.test(req.originalUrl)) {
    next(new HttpError(400, 'The URL contains a NUL character (%00); no path segment or query parameter accepts one', { code: 'invalid_request' }));
    return;
  }
  try {
    refuseNulInBody(req.body);
  } catch (err) {
    next(err);
    return;
  }
  next();
};

/** 415 for a body that is neither JSON nor multipart (multipart routes check their own type), HTML form pages excepted. */
const requireKnownContentType: RequestHandler = (req, _res, next) => {
  const hasBody = req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0;
  const htmlForm = HTML_FORM_PATHS.test(req.path) && req.is('application/x-www-form-urlencoded');
  if (BODY_METHODS.has(req.method) && hasBody && !htmlForm && !req.is(['application/json', 'application/*+json', 'multipart/form-data'])) {
    next(new HttpError(415, `Content-Type must be application/json, not ${req.headers['content-type'] ?? 'missing'}`));
    return;
  }
  next();
};

/** Largest declared body a refused request still has read whole (so that its client reads the refusal). */
export const DRAIN_BODY_BYTES = 1024 * 1024;

/** Adds the 404 handler and the error handler answering in `shape`. */
export function finishServiceApp(app: Express, shape: ErrorShape): void {
  app.use((req, _res, next) => next(new HttpError(404, `No route for ${req.method} ${req.path}`)));
  const handler: ErrorRequestHandler = (err, req, res, _next) => {
    const requestId = String(req.id ?? res.getHeader('x-request-id') ?? '');
    const httpError = toHttpError(err);
    if (httpError.status >= 500) req.log.error({ err, requestId }, 'request failed');
    if (res.headersSent) {
      res.destroy();
      return;
    }
    // A request refused before its body was read whole (no credentials for a large upload):
    // close the connection after the answer instead of reading the rest to keep it alive. A
    // small rest (a declared length up to DRAIN_BODY_BYTES) is read: Node drains it after the
    // answer, and a client still sending its body reads the refusal instead of a broken pipe.
    if (!req.complete && !(Number(req.headers['content-length']) <= DRAIN_BODY_BYTES)) res.set('connection', 'close');
    res.status(httpError.status).set(httpError.headers ?? {})
      .json(errorBody(res.locals.errorShape ?? shape, httpError, requestId));
  };
  app.use(handler);
}

function toHttpError(err: any): HttpError {
  if (err instanceof HttpError) return err;
  switch (err?.type) {
    case 'entity.too.large':
      return new HttpError(413, `Request body exceeds the limit of ${err.limit} bytes`);
    case 'entity.parse.failed':
      return new HttpError(400, 'Request body is not valid JSON', { code: 'invalid_json' });
    case 'encoding.unsupported':
    case 'charset.unsupported':
      return new HttpError(415, err.message);
    case 'request.aborted':
      return new HttpError(400, 'Request was aborted by the client');
  }
  return new HttpError(500, 'Internal error; quote the x-request-id header when reporting it');
}
