/**
 * The aggregator service (`/v1/...` with a bearer token, public `/public/v1/...`; errors in shape C).
 */
import type { Express } from 'express';
import type { PlatformContext } from '../../lib/context.ts';
import { bearerAuth, callerOf } from '../http/auth.ts';
import { healthRoutes } from '../http/health.ts';
import { createServiceApp, finishServiceApp } from '../http/service-app.ts';
import { bulkUploadRoutes } from './bulk-uploads.ts';
import { templateRoutes } from './templates.ts';
import { voiceCallbackRoutes, voiceJsonParsers, voiceRoutes } from './voice.ts';

export function createAggregatorApp(ctx: PlatformContext): Express {
  const app = createServiceApp(ctx, 'aggregator', { jsonParsers: voiceJsonParsers(ctx) });
  app.use(healthRoutes(ctx, 'aggregator'));
  // Public keys of the built-in issuer, for other services that verify our tokens.
  app.get('/.well-known/jwks.json', (_req, res) => {
    res.json(ctx.tokens.jwks());
  });
  // Signed by the voice provider, which has no bearer token.
  app.use(voiceCallbackRoutes(ctx));
  app.use('/v1', bearerAuth(ctx));
  // Before the bulk-upload routes, so that /v1/bulk-uploads/template is not taken for an upload id.
  app.use('/v1', templateRoutes(ctx));
  // Who the bearer token says the caller is, as the service sees it.
  app.get('/v1/me', (_req, res) => {
    const caller = callerOf(res);
    res.json({
      aggregator_id: caller.aggregatorId, org_id: caller.orgId, org_slug: caller.orgSlug,
      aggregator_type: caller.types, domains: [...caller.domains], roles: caller.roles,
    });
  });
  app.use('/v1', bulkUploadRoutes(ctx));
  app.use('/v1', voiceRoutes(ctx));
  finishServiceApp(app, 'C');
  return app;
}
