/**
 * The request id of the work in progress, carried across async calls with AsyncLocalStorage
 * (node:async_hooks): set by the HTTP services for each request (the `x-request-id` they answer
 * with), stored in every job that work enqueues (`lib/platform/jobs.ts`), and set again by the
 * worker while that job runs — so one id ties a request's log lines to its jobs' log lines.
 */
import { AsyncLocalStorage } from 'node:async_hooks';

/** The payload key a job's originating request id travels under. */
export const JOB_REQUEST_ID_KEY = '_request_id';

const storage = new AsyncLocalStorage<{ requestId: string }>();

/** Runs `fn` with `requestId` as the current request id (for everything `fn` awaits or starts). */
export function runWithRequestId<T>(requestId: string, fn: () => T): T {
  return storage.run({ requestId }, fn);
}

/** The current request id, or undefined outside a request or a job that carries one. */
export function currentRequestId(): string | undefined {
  return storage.getStore()?.requestId;
}

/**
 * `payload` with the current request id added under JOB_REQUEST_ID_KEY, when there is one and the
 * payload is a plain object (a payload that already names a request keeps it).
 */
export function withRequestId(payload: unknown): unknown {
  const requestId = currentRequestId();
  if (!requestId || payload === null || typeof payload !== 'object' || Array.isArray(payload)) return payload;
  if (JOB_REQUEST_ID_KEY in payload) return payload;
  return { ...payload, [JOB_REQUEST_ID_KEY]: requestId };
}

/** The request id a job's payload carries, if any. */
export function requestIdOfPayload(payload: unknown): string | undefined {
  if (payload === null || typeof payload !== 'object') return undefined;
  const id = (payload as Record<string, unknown>)[JOB_REQUEST_ID_KEY];
  return typeof id === 'string' ? id : undefined;
}

/** `{'x-request-id': id}` for a call to another service while a request or job runs, else `{}`. */
export function requestIdHeader(): Record<string, string> {
  const requestId = currentRequestId();
  return requestId ? { 'x-request-id': requestId } : {};
}
