/**
 * The voice provider's callbacks, applied in a worker thread of the aggregator service
 * (voice-callback-thread.ts): parsing a batch of up to 10,000 updates, validating it and moving its
 * items take milliseconds of JavaScript at a time, which on the service's event loop delayed the
 * status polls of the same job by as much. Here the thread and its two database sessions run at
 * BACKGROUND_NICE, so they also yield the CPU to request handling (api/http/request-thread.ts).
 */
import { workerData } from 'node:worker_threads';
import { applyCallbacks } from '../../lib/aggregator/voice/dispatch.ts';
import { providerCallbackSchema } from '../../lib/aggregator/voice/protocol.ts';
import { createPool } from '../../lib/platform/db.ts';
import { createLogger } from '../../lib/platform/logger.ts';
import { lowerSessionPriority, lowerThreadPriority } from '../../lib/platform/priority.ts';
import { jsonOf, serveRequests } from '../http/request-thread.ts';
import { parse } from '../http/validation.ts';

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

serveRequests(async (raw) => {
  const { updates } = parse(providerCallbackSchema, jsonOf(raw));
  return applyCallbacks(pool, updates, log);
}, () => pool.end());
