/**
 * How a route is documented (api/http/openapi.ts builds the OpenAPI document from these): declared
 * beside the router, with the same zod schemas its handlers validate with. README, "How to
 * document a route".
 */
import type { z } from 'zod';
import type { ErrorShape } from './errors.ts';

export type HttpMethod = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
/** How a route is authenticated: `x-api-key`, `Authorization: Bearer <JWT>`, the metrics token, or nothing. */
export type RouteSecurity = 'apiKey' | 'bearer' | 'metricsToken' | 'none';

/** One response of a route: a JSON body described by `schema`, or another content type (CSV, XLSX, HTML, text). */
export interface ResponseDoc {
  description: string;
  /** JSON body schema (content type application/json). */
  schema?: z.ZodType;
  /** A non-JSON body: its content type, and optionally a zod schema of it (e.g. `z.string()`). */
  content?: { type: string; schema?: z.ZodType; example?: unknown }[];
  example?: unknown;
  /** Response headers worth knowing, e.g. `z.object({ location: z.string().meta({ description }) })`. */
  headers?: z.ZodObject;
}

/** The documentation of one route, declared beside its router with the handler's own schemas. */
export interface RouteDoc {
  method: HttpMethod;
  /** Express template with the mount prefix, exactly as mounted: `/v1/bulk-uploads/:id`. */
  path: string;
  summary: string;
  description?: string;
  tags: string[];
  security: RouteSecurity;
  /** Path parameters: one key per `:name` of `path`. */
  params?: z.ZodObject;
  query?: z.ZodObject;
  /** Request headers the route reads besides the credential (e.g. `x-acting-org-id`). */
  headers?: z.ZodObject;
  body?: { schema: z.ZodType; contentType?: 'application/json' | 'multipart/form-data' | 'application/x-www-form-urlencoded'; example?: unknown; required?: boolean };
  /** Success (and other non-error) responses by status. */
  responses: Record<number, ResponseDoc>;
  /**
   * Error responses by status with the reason, in the service's error shape unless `errorShape`
   * says otherwise. 401 (secured routes), 400 (routes with input), 413/415 (JSON bodies) and 500
   * are added by `buildOpenApiDocument`.
   */
  errors?: Record<number, string>;
  errorShape?: ErrorShape;
}

