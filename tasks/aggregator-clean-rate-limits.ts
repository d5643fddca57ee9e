/**
 * Task `aggregator-clean-rate-limits` (crontab, hourly): deletes the expired counters of the public
 * registration and organisation sign-up rate limits (aggregator.registration_rate_limits; `expire` in epoch milliseconds, as
 * rate-limiter-flexible writes it). The limiter runs without its own interval timer, so this keeps
 * the table to the keys seen in the last window.
 */
import type { Task } from 'graphile-worker';
import type { PlatformContext } from '../lib/context.ts';

export const CLEAN_RATE_LIMITS_TASK = 'aggregator-clean-rate-limits';

export function aggregatorCleanRateLimits(ctx: PlatformContext): Task {
  return async () => {
    const { rowCount } = await ctx.pool.query('DELETE FROM aggregator.registration_rate_limits WHERE expire < $1', [Date.now()]);
    if (rowCount) ctx.logger.debug({ deleted: rowCount }, 'expired registration rate-limit counters deleted');
  };
}
