/**
 * The per-link rate limit of public registration (spec "Limits": a per-link rate limit exists, 429):
 * at most `points` submissions per link and client IP within `durationSeconds`; and the limit of
 * organisation sign-ups per client IP and per owner e-mail. Counted in PostgreSQL by
 * rate-limiter-flexible's RateLimiterPostgres (table aggregator.registration_rate_limits, created by
 * sql/008), so the limits hold across processes and restarts.
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

export interface OrgSignupRateLimit {
  /**
   * Counts one organisation sign-up (`POST /v1/orgs/create`, each of which e-mails the network
   * admin) from `clientIp` for the owner e-mail whose blind index is `emailKey`; both are counted,
   * so one limit cannot be dodged by tripping the other. Resolves null when allowed, otherwise the
   * seconds (at least 1) until both allow another (the `Retry-After` value).
   * @throws Error when the store cannot be reached (nothing was registered).
   */
  consume(clientIp: string, emailKey: string): Promise<number | null>;
}

/**
 * The sign-up limiter (Trust II): `perIp` sign-ups per client IP and `perEmail` per owner e-mail
 * within `durationSeconds`, in the same table as the public registrations' limit (its own key
 * prefixes), cleaned by the same hourly task.
 */
export function createOrgSignupRateLimit(pool: Pool, limits: { perIp: number; perEmail: number; durationSeconds: number }): OrgSignupRateLimit {
  const limiter = (keyPrefix: string, points: number) => new RateLimiterPostgres({
    storeClient: pool, schemaName: 'aggregator', tableName: 'registration_rate_limits', tableCreated: true,
    clearExpiredByTimeout: false, keyPrefix, points, duration: limits.durationSeconds,
  });
  const byIp = limiter('org-signup-ip', limits.perIp);
  const byEmail = limiter('org-signup-email', limits.perEmail);
  return {
    async consume(clientIp, emailKey) {
      const results = await Promise.allSettled([byIp.consume(clientIp), byEmail.consume(emailKey)]);
      let wait = 0;
      for (const r of results) {
        if (r.status === 'fulfilled') continue;
        if (!(r.reason instanceof RateLimiterRes)) throw r.reason;
        wait = Math.max(wait, Math.ceil(r.reason.msBeforeNext / 1000), 1);
      }
      return wait > 0 ? wait : null;
    },
  };
}
