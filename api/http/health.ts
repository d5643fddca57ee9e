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
    try {
      await ctx.pool.query('SELECT 1');
      checks.database = { ok: true };
      checks.migrations = await migrationStatus(ctx.pool).then((m) => ({ ok: m.current, ...m }));
      const worker = await workerAlive(ctx.pool);
      checks.worker = { ok: worker.alive, workers: worker.count };
      Object.assign(checks, await extraChecks());
    } catch (err) {
      checks.database ??= { ok: false, error: (err as Error).message };
    }
    const ready = Object.values(checks).every((c) => c.ok);
    res.status(ready ? 200 : 503).json({ status: ready ? 'ready' : 'not_ready', service, checks });
  });
  return router;
}
