/**
 * The console dashboard (`/console/dashboard`): the issue 10 rollup per domain as server-side SVG
 * bar charts (participants by lifecycle status and by source, uploads' row outcomes), the
 * participant list with paging, and export of the selected participants (roles admin and
 * operator, audited in aggregator.profile_exports exactly as `POST /v1/dashboard/export/profiles`).
 */
import { pipeline } from 'node:stream/promises';
import { Router, type Response } from 'express';
import { z } from 'zod';
import { computeDashboard, loadDashboard, participantPage, totalMatching } from '../../lib/aggregator/dashboard.ts';
import { exportableIds, exportColumns, MAX_EXPORT_ITEMS, profilesCsv, recordExport } from '../../lib/aggregator/export.ts';
import type { PlatformContext } from '../../lib/context.ts';
import type { Caller } from '../http/auth.ts';
import { HttpError } from '../http/errors.ts';
import { parse } from '../http/validation.ts';
import { barChart, type Bar } from './charts.ts';
import { consoleRole, languageOf, renderPage, translator } from './render.ts';

const PER_PAGE = 25;
const query = z.object({
  domain: z.string().min(1).max(64).optional(),
  page: z.coerce.number().int().min(1).max(100_000).default(1),
});
const callerOf = (res: Response) => res.locals.caller as Caller;

export function dashboardPages(ctx: PlatformContext): Router {
  const router = Router();

  router.get('/dashboard', async (req, res) => {
    const t = translator(languageOf(req));
    const q = parse(query, req.query, 'query');
    const caller = callerOf(res);
    const stored = await loadDashboard(ctx.pool, caller.aggregatorId);
    const dashboard = stored && stored.ageSeconds < ctx.config.DASHBOARD_TTL_SECONDS
      ? stored : await computeDashboard(ctx.pool, ctx.network, caller.aggregatorId);
    const rollups = dashboard.by_domain;
    const current = rollups.find((d) => d.domain === q.domain) ?? rollups.find((d) => caller.domains.has(d.domain)) ?? rollups[0];
    if (q.domain && current?.domain !== q.domain) throw new HttpError(400, t('dashboard.domain.invalid'));
    const page = current ? await participantPage(ctx.pool, ctx.pii, {
      aggregatorId: caller.aggregatorId, domain: current.domain, offset: (q.page - 1) * PER_PAGE, limit: PER_PAGE,
    }) : { participants: [], nextCursor: null };
    const chart = (title: string, bars: Bar[]) => ({ title, svg: barChart(title, bars) });
    const charts = current ? [
      chart(t('dashboard.chart.lifecycle'), Object.entries(current.participants.by_lifecycle_status).map(([k, v]) => ({ label: t(`status.${k}`), value: v }))),
      chart(t('dashboard.chart.source'), [
        { label: t('source.bulk_upload'), value: current.participants.by_source.bulk_upload },
        { label: t('source.registration_link'), value: current.participants.by_source.registration_link },
      ]),
      chart(t('dashboard.chart.rows'), [
        { label: t('outcome.passed'), value: current.uploads.rows.passed },
        { label: t('outcome.failed'), value: current.uploads.rows.failed },
        { label: t('outcome.skipped'), value: current.uploads.rows.skipped },
      ]),
    ] : [];
    const total = current ? totalMatching(current) : 0;
    renderPage(req, res, 'dashboard', {
      rollups, current, charts, participants: page.participants, page: q.page, hasMore: page.nextCursor !== null,
      total, computedAt: dashboard.computed_at,
    });
  });

  router.post('/dashboard/export', consoleRole('admin', 'operator'), async (req, res) => {
    const t = translator(languageOf(req));
    const body = req.body as Record<string, string | string[]>;
    const raw = body.item_ids;
    const itemIds = (Array.isArray(raw) ? raw : raw ? [raw] : []).map(String);
    if (itemIds.length === 0 || itemIds.length > MAX_EXPORT_ITEMS) {
      throw new HttpError(400, t('dashboard.export.none', { max: MAX_EXPORT_ITEMS }), { fields: { item_ids: ['choose participants'] } });
    }
    const domain = typeof body.domain === 'string' && ctx.network.domains.has(body.domain) ? body.domain : undefined;
    const caller = callerOf(res);
    const { ids, absent } = await exportableIds(ctx.pool, { aggregatorId: caller.aggregatorId, itemIds, domain });
    const columns = exportColumns(ctx.network, domain);
    await recordExport(ctx.pool, {
      aggregatorId: caller.aggregatorId, orgId: caller.orgId, exportedBy: caller.subject, domain,
      requested: ids.length + absent, exported: ids.length, absent, fields: columns,
    });
    const stamp = new Date().toISOString().replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z');
    res.status(200).type('text/csv; charset=utf-8').attachment(`profiles-${caller.orgSlug}-${stamp}.csv`);
    await pipeline(profilesCsv(ctx.pool, ctx.pii, ctx.network, { aggregatorId: caller.aggregatorId, ids, columns }), res);
  });

  return router;
}
