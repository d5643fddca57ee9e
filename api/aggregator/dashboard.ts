/**
 * Dashboard endpoints of the aggregator service (spec "GET /v1/dashboard",
 * "POST /v1/dashboard/export/profiles"; lib/aggregator/dashboard.ts, lib/aggregator/export.ts).
 *
 * - `GET  /v1/dashboard?domain=&page=&limit=&status=&lifecycle=&refresh=&cursor=` rollup per domain
 *   (stored, recomputed by a task when older than DASHBOARD_TTL_SECONDS or on refresh=true) and a
 *   keyset page of participants per domain
 * - `POST /v1/dashboard/export/profiles` {item_ids, domain?} → text/csv of decrypted profiles
 *   (roles admin, operator)
 */
import { pipeline } from 'node:stream/promises';
import { Router } from 'express';
import { RateLimiterPostgres, RateLimiterRes } from 'rate-limiter-flexible';
import { z } from 'zod';
import {
  decodeCursor, InvalidCursorError, loadDashboard, participantPage, refreshDashboard, totalMatching, type DashboardCursor,
} from '../../lib/aggregator/dashboard.ts';
import { exportableIds, exportColumns, MAX_EXPORT_ITEMS, profilesCsv, recordExport } from '../../lib/aggregator/export.ts';
import type { PlatformContext } from '../../lib/context.ts';
import { callerOf, requireRole } from '../http/auth.ts';
import { HttpError } from '../http/errors.ts';
import type { RouteDoc } from '../http/route-doc.ts';
import { parse, PG_INT_MAX } from '../http/validation.ts';

/** refresh=true recomputations per aggregator per minute. */
export const DASHBOARD_REFRESH_RATE = { points: 10, durationSeconds: 60 };

export const dashboardQuery = z.object({
  domain: z.string().min(1).optional(),
  page: z.coerce.number().int().min(1).max(PG_INT_MAX).default(1),
  limit: z.coerce.number().int().min(1).max(200).default(50),
  status: z.string().regex(/^[a-z0-9_]{1,32}$/, 'expected 1..32 lowercase letters, digits or underscores').optional(),
  lifecycle: z.enum(['draft', 'live']).optional(),
  refresh: z.enum(['true', 'false'], { error: 'expected true or false' }).optional(),
  cursor: z.string().min(1).max(512).optional(),
});

export const exportBody = z.object({
  item_ids: z.array(z.string().min(1).max(100)).min(1).max(MAX_EXPORT_ITEMS),
  domain: z.string().min(1).optional(),
});

export function dashboardRoutes(ctx: PlatformContext): Router {
  const router = Router();
  const ttl = ctx.config.DASHBOARD_TTL_SECONDS;
  const refreshLimiter = new RateLimiterPostgres({
    storeClient: ctx.pool, storeType: 'pool', schemaName: 'aggregator', tableName: 'dashboard_rate_limits', tableCreated: true,
    keyPrefix: 'dashboard-refresh', points: DASHBOARD_REFRESH_RATE.points, duration: DASHBOARD_REFRESH_RATE.durationSeconds,
  });
  const knownDomain = (domain: string | undefined, field: string) => {
    if (domain !== undefined && !ctx.network.domains.has(domain)) {
      throw new HttpError(400, `${field}: must be one of ${[...ctx.network.domains.keys()].join(', ')}`, { fields: { [field]: ['unknown domain'] } });
    }
  };

  router.get('/dashboard', async (req, res) => {
    const q = parse(dashboardQuery, req.query, 'query');
    knownDomain(q.domain, 'domain');
    let cursor: DashboardCursor | undefined;
    if (q.cursor) {
      try {
        cursor = decodeCursor(q.cursor);
      } catch (err) {
        if (err instanceof InvalidCursorError) throw new HttpError(400, err.message, { fields: { cursor: ['not a next_cursor of this dashboard'] } });
        throw err;
      }
      if (q.domain && q.domain !== cursor.domain) throw new HttpError(400, `cursor: continues domain ${cursor.domain}, not ${q.domain}`, { fields: { cursor: ['belongs to another domain'] } });
      if (q.page > 1) throw new HttpError(400, 'Give page or cursor, not both', { fields: { page: ['not with cursor'] } });
    }
    const caller = callerOf(res);
    const refresh = q.refresh === 'true';
    if (refresh) {
      try {
        await refreshLimiter.consume(caller.aggregatorId);
      } catch (err) {
        if (!(err instanceof RateLimiterRes)) throw err;
        const retry = Math.max(1, Math.ceil(err.msBeforeNext / 1000));
        throw new HttpError(429, `At most ${DASHBOARD_REFRESH_RATE.points} dashboard refreshes per minute; try again in ${retry} s`, { headers: { 'Retry-After': String(retry) } });
      }
    }
    let stored = await loadDashboard(ctx.pool, caller.aggregatorId);
    let refreshed = false;
    if (refresh || !stored || stored.ageSeconds >= ttl) {
      const fresh = await refreshDashboard(ctx.pool, caller.aggregatorId, ctx.config.DASHBOARD_REFRESH_WAIT_MS);
      if (fresh) {
        stored = { ...fresh, ageSeconds: 0 };
        refreshed = true;
      } else if (!stored) {
        throw new HttpError(503, 'The dashboard is being computed; try again shortly', { code: 'dashboard_not_ready', headers: { 'Retry-After': '5' } });
      }
    }
    // lifecycle and status both narrow by lifecycle status; two different values match nothing.
    const status = q.lifecycle ?? q.status;
    const contradictory = q.lifecycle !== undefined && q.status !== undefined && q.lifecycle !== q.status;
    const domains = stored.by_domain.filter((d) => (cursor ? d.domain === cursor.domain : !q.domain || d.domain === q.domain));
    const byDomain = await Promise.all(domains.map(async (rollup) => {
      const { domain, label, ...figures } = rollup;
      const page = contradictory ? { participants: [], nextCursor: null } : await participantPage(ctx.pool, ctx.pii, {
        aggregatorId: caller.aggregatorId, domain, status, cursor, offset: (q.page - 1) * q.limit, limit: q.limit,
      });
      return {
        domain, label, rollup: figures,
        participants: page.participants,
        total_matching: contradictory ? 0 : totalMatching(rollup, status),
        page: q.page, limit: q.limit, next_cursor: page.nextCursor,
      };
    }));
    res.json({
      aggregator_id: caller.aggregatorId,
      by_domain: byDomain,
      metadata: {
        computed_at: stored.computed_at, ttl_seconds: ttl, refreshed,
        age_seconds: Number(stored.ageSeconds.toFixed(3)), stale: stored.ageSeconds >= ttl,
      },
    });
  });

  router.post('/dashboard/export/profiles', requireRole('admin', 'operator'), async (req, res) => {
    const body = parse(exportBody, req.body);
    knownDomain(body.domain, 'domain');
    const caller = callerOf(res);
    const { ids, absent } = await exportableIds(ctx.pool, { aggregatorId: caller.aggregatorId, itemIds: body.item_ids, domain: body.domain });
    const columns = exportColumns(ctx.network, body.domain);
    await recordExport(ctx.pool, {
      aggregatorId: caller.aggregatorId, orgId: caller.orgId, exportedBy: caller.subject, domain: body.domain,
      requested: ids.length + absent, exported: ids.length, absent, fields: columns,
    });
    const stamp = new Date().toISOString().replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z');
    res.status(200).type('text/csv; charset=utf-8').attachment(`profiles-${caller.orgSlug}-${stamp}.csv`)
      .set({ 'X-Exported-Item-Count': String(ids.length), 'X-Absent-Item-Count': String(absent) });
    await pipeline(profilesCsv(ctx.pool, ctx.pii, ctx.network, { aggregatorId: caller.aggregatorId, ids, columns }), res);
  });

  return router;
}

const dashboardSchema = z.object({
  aggregator_id: z.uuid(),
  by_domain: z.array(z.object({
    domain: z.string(), label: z.string(),
    rollup: z.looseObject({}).meta({ description: 'the stored figures of the domain (totals by status, lifecycle, …)' }),
    participants: z.array(z.looseObject({})).meta({ description: 'a page of participants (decrypted names and contacts)' }),
    total_matching: z.int(), page: z.int(), limit: z.int(),
    next_cursor: z.string().nullable().meta({ description: 'pass as `cursor` (with `domain`) for the next page; null on the last' }),
  })),
  metadata: z.object({ computed_at: z.string(), ttl_seconds: z.number(), refreshed: z.boolean(), age_seconds: z.number(), stale: z.boolean() }),
});

/** Docs of `dashboardRoutes`. */
export const dashboardRouteDocs: RouteDoc[] = [
  {
    method: 'GET', path: '/v1/dashboard', summary: 'Rollup per domain and a page of participants', tags: ['dashboard'], security: 'bearer', query: dashboardQuery,
    description: 'The rollup is stored and recomputed by a task when older than DASHBOARD_TTL_SECONDS or on refresh=true.',
    responses: { 200: { description: 'The dashboard', schema: dashboardSchema } },
    errors: { 429: `More than ${DASHBOARD_REFRESH_RATE.points} refreshes a minute (Retry-After)`, 503: 'The first rollup is being computed (Retry-After)' },
  },
  {
    method: 'POST', path: '/v1/dashboard/export/profiles', summary: 'Decrypted profiles of participants as CSV', tags: ['dashboard'], security: 'bearer',
    body: { schema: exportBody },
    responses: {
      200: {
        description: 'CSV attachment; ids not of the caller are left out and counted', content: [{ type: 'text/csv', schema: z.string() }],
        headers: z.object({ 'x-exported-item-count': z.string(), 'x-absent-item-count': z.string() }),
      },
    },
    errors: { 403: 'Role viewer' },
  },
];
