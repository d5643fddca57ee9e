/**
 * `GET /health` (liveness: the process answers) and `GET /ready` (readiness: database reachable,
 * migrations current, a worker alive — 503 otherwise), on every service.
 */
import { Router } from 'express';
import { z } from 'zod';
import type { PlatformContext } from '../../lib/context.ts';
import { migrationStatus } from '../../lib/platform/migrate.ts';
import { workerAlive } from '../../workers/heartbeat.ts';
import type { RouteDoc } from './route-doc.ts';

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

export const healthResponseSchema = z.object({ status: z.literal('ok'), service: z.string() });
export const readyResponseSchema = z.object({
  status: z.enum(['ready', 'not_ready']),
  service: z.string(),
  checks: z.record(z.string(), z.looseObject({ ok: z.boolean() }))
    .meta({ description: 'database, migrations, worker, and the service\'s own checks (search: embeddings, vector backend)' }),
});

/** Docs of `healthRoutes` (api/http/openapi.ts). */
export const healthRouteDocs: RouteDoc[] = [
  {
    method: 'GET', path: '/health', summary: 'Liveness: the process answers', tags: ['health'], security: 'none',
    responses: { 200: { description: 'Alive', schema: healthResponseSchema, example: { status: 'ok', service: 'search' } } },
  },
  {
    method: 'GET', path: '/ready', summary: 'Readiness: database, migrations, a live worker and the service\'s own checks', tags: ['health'], security: 'none',
    responses: {
      200: { description: 'Ready', schema: readyResponseSchema },
      503: { description: 'Not ready: the failing checks say why', schema: readyResponseSchema },
    },
  },
];
