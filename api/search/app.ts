/** The search service (`/v1/search`, `/v1/search/flat`, `/v1/relevance`; header x-api-key; errors in shape A). */
import type { Express } from 'express';
import type { PlatformContext } from '../../lib/context.ts';
import { apiKeyAuth } from '../http/auth.ts';
import { healthRoutes } from '../http/health.ts';
import { createServiceApp, finishServiceApp } from '../http/service-app.ts';
import { indexEntryRoutes } from './index-entries.ts';

export function createSearchApp(ctx: PlatformContext): Express {
  const app = createServiceApp(ctx, 'search');
  app.use(healthRoutes(ctx, 'search'));
  app.use('/v1', apiKeyAuth(ctx, 'search'));
  app.use('/v1', indexEntryRoutes(ctx));
  finishServiceApp(app, 'A');
  return app;
}
