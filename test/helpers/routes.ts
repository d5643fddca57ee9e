/** The routes an Express app mounts, read from its router stack (Express 5 / router 2). */
import type { Express } from 'express';
import type { Server } from 'node:http';

export interface MountedRoute {
  method: string;
  /** Express path template with the mount prefix, e.g. `/v1/links/:id`. */
  path: string;
}

interface LayerLike {
  route?: { path: unknown; methods: Record<string, boolean> };
  handle?: { stack?: LayerLike[] };
  rawPath?: unknown;
}

/** Every (method, path) the app mounts, in mounting order, without duplicates. */
export function mountedRoutes(app: Express): MountedRoute[] {
  const seen = new Map<string, MountedRoute>();
  const walk = (stack: LayerLike[], prefix: string) => {
    for (const layer of stack) {
      if (layer.route && typeof layer.route.path === 'string') {
        for (const [method, on] of Object.entries(layer.route.methods)) {
          if (!on || method === '_all') continue;
          const route = { method: method.toUpperCase(), path: `${prefix}${layer.route.path}` };
          seen.set(`${route.method} ${route.path}`, route);
        }
      } else if (layer.handle?.stack) {
        const mount = typeof layer.rawPath === 'string' && layer.rawPath !== '/' ? layer.rawPath : '';
        walk(layer.handle.stack, `${prefix}${mount}`);
      }
    }
  };
  walk((app as unknown as { router: { stack: LayerLike[] } }).router.stack, '');
  return [...seen.values()];
}

/** The Express app behind a running HTTP server. */
export function appOf(server: Server): Express {
  return server.listeners('request')[0] as Express;
}
