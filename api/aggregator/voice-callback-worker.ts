/**
 * The voice provider's callbacks, applied in a worker thread of the aggregator service
 * (voice-callback-thread.ts): parsing a batch of up to 10,000 updates, validating it and moving its
 * items take milliseconds of JavaScript at a time, which on the service's event loop delayed the
 * status polls of the same job by as much. Here the thread and its two database sessions run at
 * BACKGROUND_NICE, so they also yield the CPU to request handling. Messages: parent →
 * `{id, raw}` (the signed body's bytes) | `stop`; thread → `{id, outcome}` | `{id, error}`.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { applyCallbacks } from '../../lib/aggregator/voice/dispatch.ts';
import { providerCallbackSchema } from '../../lib/aggregator/voice/protocol.ts';
import { createPool } from '../../lib/platform/db.ts';
import { createLogger } from '../../lib/platform/logger.ts';
import { lowerSessionPriority, lowerThreadPriority } from '../../lib/platform/priority.ts';
import { HttpError } from '../http/errors.ts';
import { parse, refuseNulInBody } from '../http/validation.ts';

const { databaseUrl, nice, logLevel } = workerData as { databaseUrl: string; nice: number; logLevel: string };
const log = createLogger(logLevel).child({ component: 'voice-callbacks' });
try {
  lowerThreadPriority(nice);
} catch (err) {
  log.warn({ err, nice }, 'could not lower the voice callbacks\' CPU priority (BACKGROUND_NICE)');
}
// Two sessions: callbacks of one job serialise on its counters anyway.
const pool = createPool(databaseUrl, 2);
lowerSessionPriority(pool, nice);

parentPort!.on('message', async (message: { id: number; raw: Uint8Array } | 'stop') => {
  if (message === 'stop') {
    await pool.end();
    parentPort!.close();
    return;
  }
  const { id, raw } = message;
  try {
    let body: unknown;
    try {
      body = JSON.parse(Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength).toString('utf8'));
    } catch {
      throw new HttpError(400, 'Request body is not valid JSON', { code: 'invalid_json' });
    }
    refuseNulInBody(body);
    const { updates } = parse(providerCallbackSchema, body);
    parentPort!.postMessage({ id, outcome: await applyCallbacks(pool, updates, log) });
  } catch (err) {
    const error = err instanceof HttpError ? { status: err.status, message: err.message, code: err.code, fields: err.fields }
      : { message: (err as Error).stack ?? String(err) };
    parentPort!.postMessage({ id, error });
  }
});
