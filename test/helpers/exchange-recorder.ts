/**
 * Records the real HTTP exchanges a running service serves (test only): method, path, query,
 * status, request body (as the app parsed it) and response body, for validation against the
 * service's OpenAPI document (test/helpers/openapi-check.ts).
 *
 * Installed as a `request` listener placed before the app's: it wraps the response's `write`/`end`
 * to keep the bytes sent, and reads `req.body` once the response has finished. The app itself is
 * untouched. Take `appOf(server)` before installing (the app is then no longer the first listener).
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { ServiceName } from '../../api/http/service-app.ts';

export interface Exchange {
  service: ServiceName;
  method: string;
  path: string;
  query: Record<string, string>;
  requestContentType: string | undefined;
  /** The body as the app parsed it (JSON routes); undefined otherwise (e.g. multipart). */
  requestBody: unknown;
  status: number;
  responseContentType: string | undefined;
  responseBody: Buffer;
}

/** Starts recording every exchange `server` serves into `sink`; returns a function that stops it. */
export function recordExchanges(server: Server, service: ServiceName, sink: Exchange[]): () => void {
  const listener = (req: IncomingMessage, res: ServerResponse) => {
    // Read now: Express rewrites req.url while routing through mounted routers.
    const url = new URL(req.url ?? '/', 'http://recorder');
    const chunks: Buffer[] = [];
    const keep = (chunk: unknown, encoding?: unknown) => {
      if (chunk === undefined || chunk === null || typeof chunk === 'function') return;
      chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as string, typeof encoding === 'string' ? encoding as BufferEncoding : 'utf8'));
    };
    const write = res.write;
    const end = res.end;
    res.write = function (this: ServerResponse, chunk: unknown, ...rest: unknown[]) {
      keep(chunk, rest[0]);
      return (write as (...args: unknown[]) => boolean).call(this, chunk, ...rest);
    } as typeof res.write;
    res.end = function (this: ServerResponse, chunk?: unknown, ...rest: unknown[]) {
      keep(chunk, rest[0]);
      return (end as (...args: unknown[]) => ServerResponse).call(this, chunk, ...rest);
    } as typeof res.end;
    res.once('finish', () => {
      const contentType = res.getHeader('content-type');
      sink.push({
        service,
        method: req.method ?? 'GET',
        path: url.pathname,
        query: Object.fromEntries(url.searchParams),
        requestContentType: req.headers['content-type'],
        requestBody: parsedBody(req as IncomingMessage & { body?: unknown }),
        status: res.statusCode,
        responseContentType: contentType === undefined ? undefined : String(contentType),
        responseBody: Buffer.concat(chunks),
      });
    });
  };
  server.prependListener('request', listener);
  return () => server.removeListener('request', listener);
}

/** The request body as the route saw it; a raw JSON body (a Buffer, e.g. the voice callbacks') parsed. */
function parsedBody(req: IncomingMessage & { body?: unknown }): unknown {
  if (!Buffer.isBuffer(req.body) || !/json/.test(req.headers['content-type'] ?? '')) return req.body;
  try {
    return JSON.parse(req.body.toString('utf8'));
  } catch {
    return req.body.toString('utf8');
  }
}
