/**
 * Task `aggregator-dashboard-refresh` {aggregator_id}: computes and stores one aggregator's
 * dashboard rollup (lib/aggregator/dashboard.ts). Idempotent; enqueued after each bulk upload,
 * by dashboard reads that find the rollup stale or are asked to refresh, and by the schedule.
 *
 * Task `aggregator-dashboards-refresh` (crontab): enqueues the former for every approved
 * aggregator whose rollup is missing or older than DASHBOARD_TTL_SECONDS.
 */
import type { Task } from 'graphile-worker';
import { computeDashboard, enqueueStaleDashboards } from '../lib/aggregator/dashboard.ts';
import type { PlatformContext } from '../lib/context.ts';

export function aggregatorDashboardRefresh(ctx: PlatformContext): Task {
  return async (payload) => {
    const { aggregator_id: aggregatorId } = payload as { aggregator_id: string };
    await computeDashboard(ctx.pool, ctx.network, aggregatorId);
  };
}

export function aggregatorDashboardsRefresh(ctx: PlatformContext): Task {
  return async () => {
    await enqueueStaleDashboards(ctx.pool, ctx.config.DASHBOARD_TTL_SECONDS);
  };
}
