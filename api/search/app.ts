/** The search service (`/v1/search`, `/v1/search/flat`, `/v1/relevance`; header x-api-key; errors in shape A). */
import type { Express } from 'express';
import type { PlatformContext } from '../../lib/context.ts';
import { registerSearchMetrics, searchReadiness, startVectorIndex } from '../../lib/search/engine.ts';
import type { Network } from '../../lib/network/config.ts';
import { apiKeyAuth } from '../http/auth.ts';
import { healthRouteDocs, healthRoutes } from '../http/health.ts';
import { metricsRouteDocs } from '../http/metrics.ts';
import { openApiRouteDocs, openApiRoutes, type RouteDoc } from '../http/openapi.ts';
import { createServiceApp, finishServiceApp } from '../http/service-app.ts';
import { flatSearchRouteDocs, flatSearchRoutes } from './flat.ts';
import { indexEntryRouteDocs, indexEntryRoutes } from './index-entries.ts';
import { relevanceRouteDocs, relevanceRoutes } from './relevance.ts';
import { searchRouteDocs, searchRoutes } from './search.ts';

/** Every route the search app mounts, documented (served at /openapi.json; README, "How to document a route"). */
export function searchServiceRouteDocs(_network: Network): RouteDoc[] {
  return [...healthRouteDocs, ...metricsRouteDocs, ...openApiRouteDocs, ...indexEntryRouteDocs, ...searchRouteDocs, ...flatSearchRouteDocs, ...relevanceRouteDocs];
}

export function createSearchApp(ctx: PlatformContext): Express {
  const app = createServiceApp(ctx, 'search');
  // Chosen at start-up, so the log says at once which embedding provider and vector backend serve;
  // the in-process vector index (usearch backend) is loaded or built in the background.
  startVectorIndex(ctx).catch((err) => ctx.logger.error({ err }, 'search engine unavailable'));
  registerSearchMetrics(ctx);
  app.use(healthRoutes(ctx, 'search', () => searchReadiness(ctx)));
  app.use(openApiRoutes('search', searchServiceRouteDocs(ctx.network)));
  app.use('/v1', apiKeyAuth(ctx, 'search'));
  app.use('/v1', indexEntryRoutes(ctx));
  app.use('/v1', searchRoutes(ctx), flatSearchRoutes(ctx), relevanceRoutes(ctx));
  finishServiceApp(app, 'A');
  return app;
}
