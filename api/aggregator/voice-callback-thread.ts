/**
 * The aggregator's side of the voice callbacks' worker thread (voice-callback-worker.ts): started on
 * the first callback and stopped when the context closes. If the thread exits, the calls in flight
 * fail (500) and the next callback starts a new thread; an update applied twice is ignored the
 * second time (dispatch.ts `applyCallbacks`), so a sender may repeat a failed batch.
 */
import { Worker } from 'node:worker_threads';
import type { PlatformContext } from '../../lib/context.ts';
import type { FieldErrors } from '../http/errors.ts';
import { HttpError } from '../http/errors.ts';

/** What applying one callback batch did (lib/aggregator/voice/dispatch.ts `applyCallbacks`). */
export interface CallbackOutcome { accepted: number; ignored: number; jobIds: string[] }

type Reply = { id: number; outcome?: CallbackOutcome; error?: { status?: number; message: string; code?: string; fields?: FieldErrors } };

/**
 * Returns `apply(raw)`: parses, validates and applies the callback batch `raw` (the request body's
 * bytes, signature already verified) in the thread.
 * @throws HttpError 400 (`invalid_json`, `invalid_request` naming the fields) for a malformed batch;
 *   Error when the thread or the database failed.
 */
export function voiceCallbackThread(ctx: PlatformContext): (raw: Buffer) => Promise<CallbackOutcome> {
  let worker: Worker | undefined;
  let next = 0;
  const waiting = new Map<number, { resolve: (outcome: CallbackOutcome) => void; reject: (err: Error) => void }>();
  const failAll = (err: Error) => {
    for (const call of waiting.values()) call.reject(err);
    waiting.clear();
  };
  const start = () => {
    const thread = new Worker(new URL('./voice-callback-worker.js', import.meta.url), {
      workerData: { databaseUrl: ctx.databaseUrl, nice: ctx.config.BACKGROUND_NICE, logLevel: ctx.config.LOG_LEVEL },
    });
    thread.on('message', ({ id, outcome, error }: Reply) => {
      const call = waiting.get(id);
      waiting.delete(id);
      if (!call) return;
      if (outcome) call.resolve(outcome);
      else if (error?.status) call.reject(new HttpError(error.status, error.message, { code: error.code, fields: error.fields }));
      else call.reject(new Error(`voice callbacks' thread: ${error?.message}`));
    });
    thread.on('error', (err) => failAll(err));
    thread.on('exit', (code) => {
      if (worker === thread) worker = undefined;
      failAll(new Error(`voice callbacks' thread exited with ${code}`));
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
  return (raw) => new Promise<CallbackOutcome>((resolve, reject) => {
    const id = next++;
    waiting.set(id, { resolve, reject });
    (worker ??= start()).postMessage({ id, raw });
  });
}
