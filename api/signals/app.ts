/** The signals service (`/api/v1/...`, header x-api-key; errors in shape A, signup in shape B). */
import type { Express } from 'express';
import type { PlatformContext } from '../../lib/context.ts';
import type { Network } from '../../lib/network/config.ts';
import { apiKeyAuth } from '../http/auth.ts';
import { healthRouteDocs, healthRoutes } from '../http/health.ts';
import { metricsRouteDocs } from '../http/metrics.ts';
import { openApiRouteDocs, openApiRoutes, type RouteDoc } from '../http/openapi.ts';
import { createServiceApp, finishServiceApp } from '../http/service-app.ts';
import { discoverRouteDocs, discoverRoutes } from './discover.ts';
import { itemRouteDocs, itemRoutes } from './items.ts';
import { matchScoreRouteDocs, matchScoreRoutes } from './match-score.ts';
import { supportRouteDocs, supportRoutes } from './support.ts';
import { actionRouteDocs, actionRoutes } from './actions.ts';
import { authRouteDocs, authRoutes } from './auth.ts';
import { peopleRouteDocs, peopleRoutes, useShapeB } from './people.ts';

/** Every route the signals app mounts, documented (served at /openapi.json; README, "How to document a route"). */
export function signalsServiceRouteDocs(_network: Network): RouteDoc[] {
  return [...healthRouteDocs, ...metricsRouteDocs, ...openApiRouteDocs, ...itemRouteDocs, ...discoverRouteDocs, ...matchScoreRouteDocs,
    ...authRouteDocs, ...peopleRouteDocs, ...actionRouteDocs, ...supportRouteDocs];
}

export function createSignalsApp(ctx: PlatformContext): Express {
  // Support takes attachments above HTTP_BODY_LIMIT: its route parses them after the API key is checked.
  const app = createServiceApp(ctx, 'signals', { ownBodyPaths: ['/api/v1/support', '/api/v1/items/batch'] });
  useShapeB(app);
  app.use(healthRoutes(ctx, 'signals'));
  app.use(openApiRoutes('signals', signalsServiceRouteDocs(ctx.network)));
  app.use('/api/v1', authRoutes(ctx)); // the auth group needs no API key (browsers hold none)
  app.use('/api/v1', apiKeyAuth(ctx, 'signals'));
  app.use('/api/v1', peopleRoutes(ctx), actionRoutes(ctx));
  app.use('/api/v1', itemRoutes(ctx));
  app.use('/api/v1', discoverRoutes(ctx));
  app.use('/api/v1', matchScoreRoutes(ctx));
  app.use('/api/v1', supportRoutes(ctx));
  finishServiceApp(app, 'A');
  return app;
}
