/**
 * `POST /v1/support` (Bearer; spec "POST /v1/support"): a support request e-mailed by a task
 * (api/http/support-route.ts, lib/network/support.ts). 5 per hour per aggregator user (token subject).
 */
import { Router } from 'express';
import type { PlatformContext } from '../../lib/context.ts';
import { callerOf } from '../http/auth.ts';
import { API_EXAMPLES } from '../http/openapi.ts';
import type { RouteDoc } from '../http/route-doc.ts';
import { supportHandler, supportRouteDoc } from '../http/support-route.ts';

export function supportRoutes(ctx: PlatformContext): Router {
  const router = Router();
  router.post('/support', supportHandler(ctx, {
    service: 'aggregator',
    filedBy: (res) => `${callerOf(res).subject} (aggregator ${callerOf(res).aggregatorId})`,
    submitter: (_req, res) => `aggregator-user:${callerOf(res).subject}`,
  }));
  return router;
}

/** Docs of `supportRoutes`. */
export const supportRouteDocs: RouteDoc[] = [supportRouteDoc('/v1/support', 'bearer', API_EXAMPLES.support)];
