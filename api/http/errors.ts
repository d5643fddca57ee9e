/**
 * HTTP errors and the three error body shapes of the spec ("Errors"):
 * - A `{error, message}` — search service, match score, relevance (and, by our decision, the rest of signals)
 * - B `{code, error, message}` — signup
 * - C `{error: {code, title, detail, docs?, fields?, requestId, timestamp}}` — aggregator service
 *
 * `code` is machine-readable (snake_case, e.g. `invalid_request`); in shape A it is the `error`
 * string, in B the `code`, in C `error.code`.
 */
import { STATUS_CODES } from 'node:http';

export type ErrorShape = 'A' | 'B' | 'C';

/** Per-field problems: dotted field path → messages. */
export type FieldErrors = Record<string, string[]>;

/**
 * FieldErrors from (field, message) pairs, messages of one field in order. Field names may come
 * from the request (`constructor`, `__proto__`, `toString`): gathered in a Map, never looked up on a
 * plain object, where they would find Object.prototype's members (issue 15's fuzzer found a 500).
 */
export function collectFieldErrors(problems: Iterable<{ field: string; message: string }>): FieldErrors {
  const fields = new Map<string, string[]>();
  for (const { field, message } of problems) fields.set(field, [...(fields.get(field) ?? []), message]);
  return Object.fromEntries(fields);
}

const DEFAULT_CODES: Record<number, string> = {
  400: 'invalid_request', 401: 'unauthorized', 403: 'forbidden', 404: 'not_found', 405: 'method_not_allowed',
  409: 'conflict', 413: 'payload_too_large', 415: 'unsupported_media_type', 422: 'unprocessable',
  429: 'rate_limited', 500: 'internal_error', 502: 'bad_gateway', 503: 'service_unavailable', 504: 'gateway_timeout',
};

/** An error with an HTTP status, a machine-readable code and a message safe to show the caller. */
export class HttpError extends Error {
  readonly code: string;
  constructor(
    readonly status: number,
    message: string,
    options: { code?: string; fields?: FieldErrors; headers?: Record<string, string> } = {},
  ) {
    super(message);
    this.name = 'HttpError';
    this.code = options.code ?? DEFAULT_CODES[status] ?? 'error';
    this.fields = options.fields;
    this.headers = options.headers;
  }
  readonly fields?: FieldErrors;
  readonly headers?: Record<string, string>;
}

/** Builds the JSON body for `err` in `shape`. */
export function errorBody(shape: ErrorShape, err: HttpError, requestId: string): Record<string, unknown> {
  switch (shape) {
    case 'A':
      return { error: err.code, message: err.message };
    case 'B':
      return { code: err.code, error: STATUS_CODES[err.status] ?? 'Error', message: err.message };
    case 'C':
      return {
        error: {
          code: err.code,
          title: STATUS_CODES[err.status] ?? 'Error',
          detail: err.message,
          ...(err.fields ? { fields: err.fields } : {}),
          requestId,
          timestamp: new Date().toISOString(),
        },
      };
  }
}
