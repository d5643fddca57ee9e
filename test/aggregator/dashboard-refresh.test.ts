/**
 * GET /v1/dashboard when no worker computes the rollup: 503 until one exists, a stale rollup
 * served as such, the recomputation left enqueued, and refresh=true rate-limited per aggregator.
 */
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { computeDashboard, enqueueStaleDashboards } from '../../lib/aggregator/dashboard.ts';
import { enqueueMany } from '../../lib/platform/jobs.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';

describe('dashboard freshness without a worker', () => {
  let platform: TestPlatform;
  beforeAll(async () => {
    platform = await startTestPlatform({ services: ['aggregator'], worker: false, env: { DASHBOARD_TTL_SECONDS: '1', DASHBOARD_REFRESH_WAIT_MS: '200' } });
  });
  afterAll(() => platform?.stop());

  const get = (token: string, query: Record<string, string> = {}) =>
    request(platform.url('aggregator')).get('/v1/dashboard').query(query).set('authorization', `Bearer ${token}`);

  it('answers 503 until a rollup exists, then serves a stale one as stale, with its recomputation enqueued', async () => {
    const agg = await platform.aggregator();
    const none = await get(agg.token);
    expect(none.status).toBe(503);
    expect(none.headers['retry-after']).toBe('5');
    expect(none.body.error.code).toBe('dashboard_not_ready');
    const { rows: jobs } = await platform.ctx.pool.query(
      `SELECT j.payload FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks t ON t.id = j.task_id
        WHERE t.identifier = 'aggregator-dashboard-refresh' AND j.key = $1`, [`dashboard:${agg.aggregatorId}`]);
    expect(jobs).toEqual([{ payload: { aggregator_id: agg.aggregatorId, _request_id: none.headers['x-request-id'] } }]);

    const computed = await computeDashboard(platform.ctx.pool, platform.ctx.network, agg.aggregatorId);
    await new Promise((resolve) => setTimeout(resolve, 1100)); // past the 1 s TTL
    const stale = await get(agg.token);
    expect(stale.status).toBe(200);
    expect(stale.body.metadata).toMatchObject({ computed_at: computed.computed_at, refreshed: false, stale: true, ttl_seconds: 1 });
    expect(stale.body.by_domain.map((d: { domain: string; total_matching: number }) => [d.domain, d.total_matching])).toEqual([['seeker', 0], ['provider', 0]]);
  });

  it('queues the recomputation ahead of background jobs queued before it', async () => {
    const agg = await platform.aggregator();
    // A bulk upload's indexing queued first (never run here: no worker).
    await enqueueMany(platform.ctx.pool, Array.from({ length: 5 }, () => ({ task: 'search-index-items', payload: { items: [] } })));
    expect((await get(agg.token)).status).toBe(503);
    // graphile-worker takes the next job by priority, then run_at, then id.
    const queue = async () => (await platform.ctx.pool.query(
      `SELECT t.identifier FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks t ON t.id = j.task_id
        WHERE j.key = $1 OR t.identifier = 'search-index-items' ORDER BY j.priority, j.run_at, j.id`, [`dashboard:${agg.aggregatorId}`])).rows
      .map((r) => r.identifier);
    expect(await queue()).toEqual(['aggregator-dashboard-refresh', ...Array(5).fill('search-index-items')]);
    // The scheduled refresh replaces the pending job under the same key: it keeps its place.
    expect(await enqueueStaleDashboards(platform.ctx.pool, 0)).toBeGreaterThan(0);
    expect(await queue()).toEqual(['aggregator-dashboard-refresh', ...Array(5).fill('search-index-items')]);
  });

  it('allows 10 refresh=true a minute per aggregator, then 429 with Retry-After', async () => {
    const agg = await platform.aggregator();
    await computeDashboard(platform.ctx.pool, platform.ctx.network, agg.aggregatorId);
    for (let i = 0; i < 10; i++) expect((await get(agg.token, { refresh: 'true' })).status).toBe(200);
    const limited = await get(agg.token, { refresh: 'true' });
    expect(limited.status).toBe(429);
    expect(limited.body.error.code).toBe('rate_limited');
    expect(Number(limited.headers['retry-after'])).toBeGreaterThan(0);
    expect(Number(limited.headers['retry-after'])).toBeLessThanOrEqual(60);
    // Reads without refresh still answer.
    expect((await get(agg.token)).status).toBe(200);
  });
});
