/**
 * The aggregator service (`/v1/...` with a bearer token, public `/public/v1/...`; errors in shape C).
 */
import type { Express } from 'express';
import { z } from 'zod';
import type { PlatformContext } from '../../lib/context.ts';
import type { Network } from '../../lib/network/config.ts';
import { bearerAuth, callerOf } from '../http/auth.ts';
import { healthRouteDocs, healthRoutes } from '../http/health.ts';
import { metricsRouteDocs } from '../http/metrics.ts';
import { openApiRouteDocs, openApiRoutes, type RouteDoc } from '../http/openapi.ts';
import { createServiceApp, finishServiceApp } from '../http/service-app.ts';
import { bulkMappingRouteDocs, bulkMappingRoutes } from './bulk-mappings.ts';
import { bulkUploadRouteDocs, bulkUploadRoutes } from './bulk-uploads.ts';
import { templateRouteDocs, templateRoutes } from './templates.ts';
import { linkRouteDocs, linkRoutes } from './links.ts';
import { publicRegistrationRouteDocs, publicRegistrationRoutes } from './public-registrations.ts';
import { registrationFormRouteDocs, registrationFormRoutes } from './registration-form.ts';
import { orgRouteDocs, orgRoutes } from './orgs.ts';
import { aggregatorRegistrationRouteDocs, aggregatorRegistrationRoutes } from './aggregator-registrations.ts';
import { reviewRouteDocs, reviewRoutes } from './reviews.ts';
import { supportRouteDocs, supportRoutes } from './support.ts';
import { dashboardRouteDocs, dashboardRoutes } from './dashboard.ts';
import { bulkUploadEventRouteDocs, bulkUploadEventRoutes } from './bulk-upload-events.ts';
import { registerBulkUploadMetrics } from '../../lib/aggregator/bulk/upload-jobs.ts';
import { consoleRoutes } from '../console/routes.ts';
import { VOICE_OWN_BODY_PATHS, voiceCallbackRouteDocs, voiceCallbackRoutes, voiceRouteDocs, voiceRoutes } from './voice.ts';

const jwksSchema = z.object({ keys: z.array(z.looseObject({ kty: z.string(), kid: z.string().optional() })) });
const meSchema = z.object({
  aggregator_id: z.uuid(), org_id: z.uuid(), org_slug: z.string(), aggregator_type: z.array(z.string()),
  domains: z.array(z.string()).meta({ description: 'participant domains the caller may onboard' }), roles: z.array(z.string()),
});

/** Every route the aggregator app mounts, documented (served at /openapi.json; README, "How to document a route"). */
export function aggregatorServiceRouteDocs(network: Network): RouteDoc[] {
  return [
    ...healthRouteDocs, ...metricsRouteDocs, ...openApiRouteDocs,
    {
      method: 'GET', path: '/.well-known/jwks.json', summary: 'Public keys of the built-in token issuer (RFC 7517)', tags: ['identity'], security: 'none',
      responses: { 200: { description: 'A JWK set', schema: jwksSchema } },
    },
    {
      method: 'GET', path: '/v1/me', summary: 'Who the bearer token says the caller is', tags: ['identity'], security: 'bearer',
      responses: { 200: { description: 'The caller', schema: meSchema } }, errors: { 403: 'Aggregator or organisation not approved' },
    },
    ...publicRegistrationRouteDocs, ...registrationFormRouteDocs, ...reviewRouteDocs,
    ...orgRouteDocs(network), ...aggregatorRegistrationRouteDocs(network), ...voiceCallbackRouteDocs,
    ...templateRouteDocs(network), ...bulkMappingRouteDocs, ...bulkUploadEventRouteDocs, ...bulkUploadRouteDocs, ...linkRouteDocs,
    ...supportRouteDocs, ...dashboardRouteDocs, ...voiceRouteDocs,
  ];
}

export function createAggregatorApp(ctx: PlatformContext): Express {
  // Bodies above HTTP_BODY_LIMIT, or raw for a signature, are parsed by their routes after authentication.
  const app = createServiceApp(ctx, 'aggregator', { ownBodyPaths: [...VOICE_OWN_BODY_PATHS, '/v1/support'] });
  registerBulkUploadMetrics(ctx.metrics, ctx.pool);
  app.use(healthRoutes(ctx, 'aggregator'));
  app.use(openApiRoutes('aggregator', aggregatorServiceRouteDocs(ctx.network)));
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
  // First after authentication: its status poll is the hottest route (hundreds of requests a
  // second per job), and no other router claims /v1/campaign.
  app.use('/v1', voiceRoutes(ctx));
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
  finishServiceApp(app, 'C');
  return app;
}
