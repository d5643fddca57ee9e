/**
 * A route's work in a worker thread of its service: the request body's bytes go to the thread,
 * which parses, validates and applies them in database sessions of its own at BACKGROUND_NICE, and
 * answers with what the route sends back. For bodies that are background work and cost
 * milliseconds of JavaScript a request: a voice provider's callback batches (api/aggregator), the
 * item batches a bulk upload's jobs push to signals (api/signals). On the service's event loop that
 * work delayed every request behind it (docs/decisions.md, "Voice campaigns" and "Search under load").
 *
 * Parent side `requestThread` (started on the first request, stopped when the context closes); the
 * thread's module calls `serveRequests`. Messages: parent → `{id, raw, requestId}` | `stop`; thread →
 * `{id, outcome}` | `{id, error}`. If the thread exits, the calls in flight fail (500) and the next
 * request starts a new thread: a route sent here must be safe to repeat after a failure.
 */
import { parentPort, Worker } from 'node:worker_threads';
import type { PlatformContext } from '../../lib/context.ts';
import { currentRequestId, runWithRequestId } from '../../lib/platform/request-context.ts';
import type { FieldErrors } from './errors.ts';
import { HttpError } from './errors.ts';
import { refuseNulInBody } from './validation.ts';

type Reply<T> = { id: number; outcome?: T; error?: { status?: number; message: string; code?: string; fields?: FieldErrors } };

/**
 * Returns `call(raw)`, which has the thread of module `entry` (a plain JavaScript file that
 * registers tsx and imports its TypeScript part, as voice-callback-worker.js) handle the bytes
 * `raw` and resolves to its outcome. The thread gets `workerData` plus `databaseUrl`, `nice`
 * (BACKGROUND_NICE) and `logLevel`.
 * @throws (the promise) HttpError with the thread's status, message, code and fields for a refused
 *   body (e.g. 400 naming the field); Error when the thread or the database failed (500).
 */
export function requestThread<T>(ctx: PlatformContext, entry: URL, name: string, workerData: Record<string, unknown> = {}): (raw: Buffer) => Promise<T> {
  let worker: Worker | undefined;
  let next = 0;
  const waiting = new Map<number, { resolve: (outcome: T) => void; reject: (err: Error) => void }>();
  const failAll = (err: Error) => {
    for (const call of waiting.values()) call.reject(err);
    waiting.clear();
  };
  const start = () => {
    const thread = new Worker(entry, {
      workerData: { ...workerData, databaseUrl: ctx.databaseUrl, nice: ctx.config.BACKGROUND_NICE, logLevel: ctx.config.LOG_LEVEL },
    });
    thread.on('message', ({ id, outcome, error }: Reply<T>) => {
      const call = waiting.get(id);
      waiting.delete(id);
      if (!call) return;
      if (!error) call.resolve(outcome as T);
      else if (error.status) call.reject(new HttpError(error.status, error.message, { code: error.code, fields: error.fields }));
      else call.reject(new Error(`${name}: ${error.message}`));
    });
    thread.on('error', (err) => failAll(err));
    thread.on('exit', (code) => {
      if (worker === thread) worker = undefined;
      failAll(new Error(`${name} exited with ${code}`));
    });
    thread.unref();
    return thread;
  };
  ctx.onClose(async () => {
    const thread = worker;
    worker = undefined;
    if (!thread) return;
    const exited = new Promise((resolve) => thread.once('exit', resolve));
    thread.postMessage('stop');
    await exited;
  });
  return (raw) => new Promise<T>((resolve, reject) => {
    const id = next++;
    waiting.set(id, { resolve, reject });
    (worker ??= start()).postMessage({ id, raw, requestId: currentRequestId() });
  });
}

/**
 * The thread's side: answers each `{id, raw}` with `handle(raw)`'s outcome, or its error (an
 * HttpError's status, message, code and fields; any other error as a failure). On `stop`, runs
 * `stop` (closing the thread's pool) and lets the thread end.
 */
export function serveRequests<T>(handle: (raw: Buffer) => Promise<T>, stop: () => Promise<void>): void {
  parentPort!.on('message', async (message: { id: number; raw: Uint8Array; requestId?: string } | 'stop') => {
    if (message === 'stop') {
      await stop();
      parentPort!.close();
      return;
    }
    const { id, raw, requestId } = message;
    try {
      // The request's id goes with the work, as on the event loop: into its log lines and the jobs it enqueues.
      const bytes = Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength);
      const outcome = requestId ? await runWithRequestId(requestId, () => handle(bytes)) : await handle(bytes);
      parentPort!.postMessage({ id, outcome });
    } catch (err) {
      const error = err instanceof HttpError ? { status: err.status, message: err.message, code: err.code, fields: err.fields }
        : { message: (err as Error).stack ?? String(err) };
      parentPort!.postMessage({ id, error });
    }
  });
}

/**
 * The JSON value of a request body's bytes `raw`, as the services' JSON parser gives it.
 * @throws HttpError 400 `invalid_json` for bytes that are not JSON, 400 for a NUL character in a
 *   value or key (`refuseNulInBody`).
 */
export function jsonOf(raw: Buffer): unknown {
  let body: unknown;
  try {
    body = JSON.parse(raw.toString('utf8'));
  } catch {
    throw new HttpError(400, 'Request body is not valid JSON', { code: 'invalid_json' });
  }
  refuseNulInBody(body);
  return body;
}
