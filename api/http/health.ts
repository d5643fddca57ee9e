/**
 * `GET /health` (liveness: the process answers) and `GET /ready` (readiness: database reachable,
 * migrations current, a worker alive — 503 otherwise), on every service.
 */
import { Router } from 'express';
import type { PlatformContext } from '../../lib/context.ts';
import { migrationStatus } from '../../lib/platform/migrate.ts';
import { workerAlive } from '../../workers/heartbeat.ts';

export interface ReadinessCheck {
  ok: boolean;
  [detail: string]: unknown;
}

/**
 * Health routes for `service`. `extraChecks` adds service-specific checks (e.g. the search
 * service's embedding provider and vector backend); a failing one makes `/ready` answer 503.
 */
export function healthRoutes(
  ctx: PlatformContext,
  service: string,
  extraChecks: () => Promise<Record<string, ReadinessCheck>> = async () => ({}),
): Router {
  const router = Router();
  router.get('/health', (_req, res) => {
    res.json({ status: 'ok', service });
  });
  router.get('/ready', async (_req, res) => {
    const checks: Record<string, ReadinessCheck> = {};
    // Each check stands alone: one that throws is reported failed, never left out (which would read as ready).
    const check = async (name: string, run: () => Promise<ReadinessCheck>) => {
      try {
        checks[name] = await run();
      } catch (err) {
        checks[name] = { ok: false, error: (err as Error).message };
      }
    };
    await check('database', async () => {
      await ctx.pool.query('SELECT 1');
      return { ok: true };
    });
    await check('migrations', async () => migrationStatus(ctx.pool).then((m) => ({ ok: m.current, ...m })));
    await check('worker', async () => workerAlive(ctx.pool).then((w) => ({ ok: w.alive, workers: w.count })));
    try {
      Object.assign(checks, await extraChecks());
    } catch (err) {
      checks[`${service}_checks`] = { ok: false, error: (err as Error).message };
    }
    const ready = Object.values(checks).every((c) => c.ok);
    res.status(ready ? 200 : 503).json({ status: ready ? 'ready' : 'not_ready', service, checks });
  });
  return router;
}
