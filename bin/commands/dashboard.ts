/**
 * `ldp dashboard --aggregator ID [--refresh] [--json]`: an aggregator's dashboard rollup
 * (lib/aggregator/dashboard.ts) as a table, one row per domain. The stored rollup is used while
 * younger than DASHBOARD_TTL_SECONDS; otherwise (or with --refresh) it is computed here and stored.
 */
import { findAggregator } from '../../lib/aggregator/aggregators.ts';
import { computeDashboard, loadDashboard, type DomainRollup, type StoredDashboard } from '../../lib/aggregator/dashboard.ts';
import { CliError, withPlatformContext } from '../command-context.ts';

/** The rollup as an aligned text table (header, one row per domain). */
export function rollupTable(byDomain: DomainRollup[]): string {
  const header = ['domain', 'participants', 'live', 'draft', 'paused', 'retired', 'pending', 'bulk', 'link', 'uploads', 'passed', 'failed', 'skipped', 'live share', 'last activity'];
  const rows = byDomain.map((d) => {
    const p = d.participants;
    const s = p.by_lifecycle_status;
    return [d.domain, p.total, s.live, s.draft, s.paused, s.retired, s.pending, p.by_source.bulk_upload, p.by_source.registration_link,
      d.uploads.total, d.uploads.rows.passed, d.uploads.rows.failed, d.uploads.rows.skipped,
      `${(d.live_share * 100).toFixed(1)} %`, d.last_activity_at ?? '—'].map(String);
  });
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  // Text left-aligned, figures right-aligned.
  const line = (cells: string[]) => cells.map((c, i) => (i === 0 || i === cells.length - 1 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join('  ').trimEnd();
  return [line(header), ...rows.map(line)].join('\n');
}

export async function dashboard(opts: { aggregator: string; refresh?: boolean; json?: boolean }): Promise<void> {
  const { agg, stored } = await withPlatformContext(async (ctx) => {
    const agg = await findAggregator(ctx.pool, opts.aggregator);
    if (!agg) throw new CliError(`No aggregator with id ${opts.aggregator}`);
    const current = await loadDashboard(ctx.pool, agg.aggregator_id);
    const stored: StoredDashboard = !opts.refresh && current && current.ageSeconds < ctx.config.DASHBOARD_TTL_SECONDS
      ? current : await computeDashboard(ctx.pool, ctx.network, agg.aggregator_id);
    return { agg, stored };
  });
  if (opts.json) {
    process.stdout.write(`${JSON.stringify({ aggregator_id: agg.aggregator_id, by_domain: stored.by_domain, computed_at: stored.computed_at }, null, 2)}\n`);
    return;
  }
  process.stdout.write(`${agg.name} (${agg.aggregator_id}), computed at ${stored.computed_at}\n\n${rollupTable(stored.by_domain)}\n`);
}
