/**
 * The aggregator service (`/v1/...` with a bearer token, public `/public/v1/...`; errors in shape C).
 */
import type { Express } from 'express';
import type { PlatformContext } from '../../lib/context.ts';
import { bearerAuth, callerOf } from '../http/auth.ts';
import { healthRoutes } from '../http/health.ts';
import { createServiceApp, finishServiceApp } from '../http/service-app.ts';
import { bulkMappingRoutes } from './bulk-mappings.ts';
import { bulkUploadRoutes } from './bulk-uploads.ts';
import { templateRoutes } from './templates.ts';
import { linkRoutes } from './links.ts';
import { publicRegistrationRoutes } from './public-registrations.ts';
import { registrationFormRoutes } from './registration-form.ts';
import { orgRoutes } from './orgs.ts';
import { aggregatorRegistrationRoutes } from './aggregator-registrations.ts';
import { reviewRoutes } from './reviews.ts';
import { supportRoutes } from './support.ts';
import { dashboardRoutes } from './dashboard.ts';
import { supportJsonParser } from '../http/support-route.ts';
import { voiceCallbackRoutes, voiceJsonParsers, voiceRoutes } from './voice.ts';
import { bulkUploadEventRoutes } from './bulk-upload-events.ts';
import { consoleRoutes } from '../console/routes.ts';

export function createAggregatorApp(ctx: PlatformContext): Express {
  const app = createServiceApp(ctx, 'aggregator', { jsonParsers: { ...voiceJsonParsers(ctx), '/v1/support': supportJsonParser() } });
  app.use(healthRoutes(ctx, 'aggregator'));
  // Public keys of the built-in issuer, for other services that verify our tokens.
  app.get('/.well-known/jwks.json', (_req, res) => {
    res.json(ctx.tokens.jwks());
  });
  app.use('/public/v1', publicRegistrationRoutes(ctx));
  app.use(registrationFormRoutes(ctx), reviewRoutes(ctx));
  // Registration endpoints carry no aggregator token: before bearerAuth.
  app.use('/v1', orgRoutes(ctx), aggregatorRegistrationRoutes(ctx));
  // Signed by the voice provider, which has no bearer token.
  app.use(voiceCallbackRoutes(ctx));
  // The operator console (issue 18) has its own cookie sessions: before bearerAuth.
  app.use('/console', consoleRoutes(ctx));
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
  // Saved mappings before the bulk-upload routes: /v1/bulk-uploads/mappings is no upload id.
  app.use('/v1', bulkMappingRoutes(ctx));
  app.use('/v1', bulkUploadEventRoutes(ctx), bulkUploadRoutes(ctx));
  app.use('/v1', linkRoutes(ctx));
  app.use('/v1', supportRoutes(ctx));
  app.use('/v1', dashboardRoutes(ctx));
  app.use('/v1', voiceRoutes(ctx));
  finishServiceApp(app, 'C');
  return app;
}
