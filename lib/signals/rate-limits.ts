/**
 * Rate limits of the people endpoints, counted in PostgreSQL (rate-limiter-flexible's
 * RateLimiterPostgres on `signals.rate_limits`, created by sql/007), so they hold across processes.
 */
import { RateLimiterPostgres, RateLimiterRes } from 'rate-limiter-flexible';
import type { Pool } from '../platform/db.ts';

/** A limit was reached; `retryAfterSeconds` goes into the Retry-After header (RFC 9110 §10.2.3). */
export class RateLimitedError extends Error {
  name = 'RateLimitedError';
  constructor(message: string, readonly retryAfterSeconds: number) {
    super(message);
  }
}

export interface RateLimit {
  /**
   * Counts one event for each key (all are counted, so a caller cannot dodge one limit by
   * tripping another first).
   * @throws RateLimitedError when any key is over its limit.
   */
  consume(...keys: string[]): Promise<void>;
}

/** A limit of `points` events per `durationSeconds` per key, prefixed `name`. */
export function createRateLimit(pool: Pool, name: string, points: number, durationSeconds: number): RateLimit {
  const limiter = new RateLimiterPostgres({
    storeClient: pool, storeType: 'pool', schemaName: 'signals', tableName: 'rate_limits', tableCreated: true,
    clearExpiredByTimeout: false, keyPrefix: name, points, duration: durationSeconds,
  });
  return {
    async consume(...keys) {
      const results = await Promise.allSettled(keys.map((k) => limiter.consume(k)));
      const refused = results.flatMap((r) => (r.status === 'rejected' ? [r.reason] : []));
      for (const reason of refused) if (!(reason instanceof RateLimiterRes)) throw reason;
      if (refused.length) {
        const wait = Math.max(...refused.map((r: RateLimiterRes) => r.msBeforeNext));
        throw new RateLimitedError(`Too many requests; try again in ${Math.ceil(wait / 1000)} s`, Math.max(1, Math.ceil(wait / 1000)));
      }
    },
  };
}
