/**
 * The Express app every service starts from: request ids, structured request logs, the JSON body
 * parser with its size limit, and — added by `finish` — the 404 and error handlers that answer in
 * the service's error shape (a route may pick another shape through `res.locals.errorShape`).
 */
import { randomUUID } from 'node:crypto';
import express, { type ErrorRequestHandler, type Express, type RequestHandler } from 'express';
import { pinoHttp } from 'pino-http';
import type { PlatformContext } from '../../lib/context.ts';
import { errorBody, HttpError, type ErrorShape } from './errors.ts';

export type ServiceName = 'signals' | 'search' | 'aggregator';

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;
const BODY_METHODS = new Set(['POST', 'PUT', 'PATCH']);

export const JSON_TYPES = ['application/json', 'application/*+json'];

export interface ServiceAppOptions {
  /**
   * JSON body parsers for exact paths that need another one than the default (a larger limit, the
   * raw body kept for a signature check); every other path gets HTTP_BODY_LIMIT.
   */
  jsonParsers?: Record<string, RequestHandler>;
}

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
  }));
  app.use(requireKnownContentType);
  const json = express.json({ limit: ctx.config.HTTP_BODY_LIMIT, type: JSON_TYPES });
  const ownParsers = new Map(Object.entries(options.jsonParsers ?? {}));
  app.use((req, res, next) => (ownParsers.get(req.path) ?? json)(req, res, next));
  return app;
}

/** 415 for a body that is neither JSON nor multipart (multipart routes check their own type). */
const requireKnownContentType: RequestHandler = (req, _res, next) => {
  const hasBody = req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0;
  if (BODY_METHODS.has(req.method) && hasBody && !req.is(['application/json', 'application/*+json', 'multipart/form-data'])) {
    next(new HttpError(415, `Content-Type must be application/json, not ${req.headers['content-type'] ?? 'missing'}`));
    return;
  }
  next();
};

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
