/**
 * The per-link rate limit of public registration (spec "Limits": a per-link rate limit exists, 429):
 * at most `points` submissions per link and client IP within `durationSeconds`, counted in
 * PostgreSQL by rate-limiter-flexible's RateLimiterPostgres (table aggregator.registration_rate_limits,
 * created by sql/008), so the limit holds across processes and restarts.
 */
import { RateLimiterPostgres, RateLimiterRes } from 'rate-limiter-flexible';
import type { Pool } from '../platform/db.ts';

export interface RegistrationRateLimit {
  /**
   * Counts one submission of `clientIp` on `linkId`. Resolves null when allowed, otherwise the
   * number of seconds (at least 1) until the next submission is allowed (the `Retry-After` value,
   * RFC 9110 §10.2.3).
   * @throws Error when the store cannot be reached (the caller answers 500; nothing was registered).
   */
  consume(linkId: string, clientIp: string): Promise<number | null>;
}

/** A limiter of `points` per `durationSeconds` per link and client IP, stored through `pool`. */
export function createRegistrationRateLimit(pool: Pool, points: number, durationSeconds: number): RegistrationRateLimit {
  const limiter = new RateLimiterPostgres({
    storeClient: pool, schemaName: 'aggregator', tableName: 'registration_rate_limits', tableCreated: true,
    // No interval timer: expired rows are reset in place by the next consume of the same key.
    clearExpiredByTimeout: false,
    keyPrefix: 'public-registration', points, duration: durationSeconds,
  });
  return {
    async consume(linkId, clientIp) {
      try {
        await limiter.consume(`${linkId}:${clientIp}`);
        return null;
      } catch (err) {
        if (err instanceof RateLimiterRes) return Math.max(1, Math.ceil(err.msBeforeNext / 1000));
        throw err;
      }
    },
  };
}
