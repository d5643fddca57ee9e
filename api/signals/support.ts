/**
 * `POST /api/v1/support/` (x-api-key; spec "POST /api/v1/support/", issue 7 item 7): a support
 * request e-mailed by a task (api/http/support-route.ts, lib/network/support.ts). 5 per hour per
 * submitter identifier: the e-mail (lower-cased), else the phone (digits), else the API key.
 */
import { Router } from 'express';
import type { PlatformContext } from '../../lib/context.ts';
import { API_EXAMPLES } from '../http/openapi.ts';
import type { RouteDoc } from '../http/route-doc.ts';
import { supportHandler, supportRouteDoc } from '../http/support-route.ts';

const keyOf = (res: { locals: Record<string, unknown> }) => (res.locals.apiKey as { keyId: string }).keyId;

export function supportRoutes(ctx: PlatformContext): Router {
  const router = Router();
  router.post('/support', supportHandler(ctx, {
    service: 'signals',
    filedBy: (res) => `api-key:${keyOf(res)}`,
    submitter: (_req, res, request) => (request.email ? `email:${request.email.toLowerCase()}`
      : request.phone ? `phone:${request.phone.replace(/\D/g, '')}` : `api-key:${keyOf(res)}`),
  }));
  return router;
}

/** Docs of `supportRoutes`. */
export const supportRouteDocs: RouteDoc[] = [supportRouteDoc('/api/v1/support', 'apiKey', API_EXAMPLES.support)];
