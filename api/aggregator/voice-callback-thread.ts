/**
 * The aggregator's side of the voice callbacks' worker thread (voice-callback-worker.ts, through
 * api/http/request-thread.ts): started on the first callback and stopped when the context closes.
 * An update applied twice is ignored the second time (dispatch.ts `applyCallbacks`), so a sender
 * may repeat a batch that failed because the thread exited.
 */
import type { PlatformContext } from '../../lib/context.ts';
import { requestThread } from '../http/request-thread.ts';

/** What applying one callback batch did (lib/aggregator/voice/dispatch.ts `applyCallbacks`). */
export interface CallbackOutcome { accepted: number; ignored: number; jobIds: string[] }

/**
 * Returns `apply(raw)`: parses, validates and applies the callback batch `raw` (the request body's
 * bytes, signature already verified) in the thread.
 * @throws HttpError 400 (`invalid_json`, `invalid_request` naming the fields) for a malformed batch;
 *   Error when the thread or the database failed.
 */
export function voiceCallbackThread(ctx: PlatformContext): (raw: Buffer) => Promise<CallbackOutcome> {
  return requestThread<CallbackOutcome>(ctx, new URL('./voice-callback-worker.js', import.meta.url), "voice callbacks' thread");
}
