/**
 * OpenAPI 3.1 documents generated from the zod schemas the handlers validate with (zod-openapi,
 * https://github.com/samchungy/zod-openapi), and the routes that serve them: `GET /openapi.json`
 * and the offline reference page `GET /docs` (Swagger UI from the swagger-ui-dist package, no CDN).
 *
 * Each router module declares its routes' documentation beside the router as `RouteDoc`s, using
 * the same zod schemas as its handlers; each service's app.ts lists them (README, "How to
 * document a route"). test/platform/openapi.test.ts fails when a mounted route is undocumented or a
 * documented one is not mounted, and validates real exchanges against the document.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import express, { Router } from 'express';
import { z } from 'zod';
import { createDocument, type ZodOpenApiObject, type ZodOpenApiOperationObject, type ZodOpenApiResponseObject } from 'zod-openapi';
import { itemRecordSchema } from '../../lib/network/items.ts';
import type { ErrorShape } from './errors.ts';
import type { ResponseDoc, RouteDoc } from './route-doc.ts';
import type { ServiceName } from './service-app.ts';

export type { ResponseDoc, RouteDoc } from './route-doc.ts';

/** The error shapes of the spec ("Errors"; api/http/errors.ts). */
export const errorShapeSchemas: Record<ErrorShape, z.ZodType> = {
  A: z.object({
    error: z.string().meta({ description: 'machine-readable code, e.g. invalid_request', example: 'invalid_request' }),
    message: z.string(),
  }).meta({ id: 'ErrorA', description: 'Error shape A (search service, match score, relevance, and the rest of signals but signup)' }),
  B: z.object({
    code: z.string().meta({ example: 'invalid_request' }),
    error: z.string().meta({ description: 'HTTP reason phrase', example: 'Bad Request' }),
    message: z.string(),
  }).meta({ id: 'ErrorB', description: 'Error shape B (signup)' }),
  C: z.looseObject({
    error: z.looseObject({
      code: z.string().meta({ example: 'invalid_request' }),
      title: z.string().meta({ description: 'HTTP reason phrase', example: 'Bad Request' }),
      detail: z.string(),
      docs: z.string().optional(),
      fields: z.record(z.string(), z.array(z.string())).optional()
        .meta({ description: 'per-field messages, keyed by dotted field path' }),
      requestId: z.string().meta({ description: 'also in the x-request-id response header' }),
      timestamp: z.string().meta({ format: 'date-time' }),
    }),
  }).meta({ id: 'ErrorC', description: 'Error shape C (aggregator service)' }),
};

const PACKAGE_VERSION: string = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')).version;

/** Example request bodies of fixtures/api-examples.json, by name (`search`, `discover`, `item`, …). */
export const API_EXAMPLES: Record<string, unknown> = JSON.parse(readFileSync(new URL('../../fixtures/api-examples.json', import.meta.url), 'utf8'));

/** The item record (spec "Item record") as a named component. */
export const itemRecordDoc = itemRecordSchema.meta({ id: 'ItemRecord', description: 'An item (spec "Item record")' });

const SERVICE_INFO: Record<ServiceName, { title: string; description: string; errorShape: ErrorShape }> = {
  signals: {
    title: 'Local Discovery Platform: signals service',
    description: 'Items, discover and match score (`/api/v1/...`, header `x-api-key`). Errors in shape A (signup: B).',
    errorShape: 'A',
  },
  search: {
    title: 'Local Discovery Platform: search service',
    description: 'Semantic, structured and geographic search and relevance (`/v1/...`, header `x-api-key`). Errors in shape A.',
    errorShape: 'A',
  },
  aggregator: {
    title: 'Local Discovery Platform: aggregator service',
    description: 'Bulk-upload templates and bulk uploads for aggregators (`/v1/...`, `Authorization: Bearer <JWT>`). Errors in shape C.',
    errorShape: 'C',
  },
};

const SECURITY_SCHEMES = {
  apiKey: { type: 'apiKey', in: 'header', name: 'x-api-key', description: 'An API key of this service (`ldp keys create`)' },
  bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: 'A bearer token of the built-in issuer (`ldp token`) or the trusted OIDC issuer' },
  metricsToken: { type: 'http', scheme: 'bearer', description: 'METRICS_TOKEN: when it is set, every client needs it, loopback ones too; unset, only loopback clients are answered (without a credential)' },
} as const;

const DEFAULT_ERROR_REASONS: Record<number, string> = {
  400: 'Invalid request: the message names each field',
  401: 'Missing or invalid credential',
  413: 'Request body too large',
  415: 'Unsupported content type',
  500: 'Internal error; quote the x-request-id header',
};

/** `/v1/bulk-uploads/:id` → `/v1/bulk-uploads/{id}` (OpenAPI path templating). */
export function openApiPath(expressPath: string): string {
  return expressPath.replace(/:(\w+)/g, '{$1}');
}

function responseObject(doc: ResponseDoc): ZodOpenApiResponseObject {
  const content: NonNullable<ZodOpenApiResponseObject['content']> = {};
  if (doc.schema) content['application/json'] = { schema: doc.schema, ...(doc.example !== undefined ? { example: doc.example } : {}) };
  for (const c of doc.content ?? []) content[c.type] = { ...(c.schema ? { schema: c.schema } : {}), ...(c.example !== undefined ? { example: c.example } : {}) };
  return {
    description: doc.description,
    ...(Object.keys(content).length ? { content } : {}),
    ...(doc.headers ? { headers: doc.headers } : {}),
  };
}

function operationOf(doc: RouteDoc, shape: ErrorShape): ZodOpenApiOperationObject {
  const names = [...doc.path.matchAll(/:(\w+)/g)].map((m) => m[1]);
  const declared = Object.keys(doc.params?.shape ?? {});
  if (names.join() !== declared.join()) {
    throw new Error(`${doc.method} ${doc.path}: params must declare exactly ${names.join(', ') || 'nothing'}, not ${declared.join(', ') || 'nothing'}`);
  }
  const jsonBody = doc.body && (doc.body.contentType ?? 'application/json') === 'application/json';
  const reasons: Record<number, string | undefined> = {
    ...(doc.params || doc.query || doc.body ? { 400: DEFAULT_ERROR_REASONS[400] } : {}),
    ...(doc.security === 'apiKey' || doc.security === 'bearer' ? { 401: DEFAULT_ERROR_REASONS[401] } : {}),
    ...(jsonBody ? { 413: DEFAULT_ERROR_REASONS[413], 415: DEFAULT_ERROR_REASONS[415] } : {}),
    500: DEFAULT_ERROR_REASONS[500],
    ...doc.errors,
  };
  const errorSchema = errorShapeSchemas[doc.errorShape ?? shape];
  const responses: ZodOpenApiOperationObject['responses'] = {};
  for (const [status, response] of Object.entries(doc.responses)) responses[status as `${1 | 2 | 3 | 4 | 5}${string}`] = responseObject(response);
  for (const [status, reason] of Object.entries(reasons)) {
    if (!reason || doc.responses[Number(status)]) continue;
    responses[status as `${1 | 2 | 3 | 4 | 5}${string}`] = { description: reason, content: { 'application/json': { schema: errorSchema } } };
  }
  return {
    operationId: `${doc.method.toLowerCase()}${doc.path.replace(/[^A-Za-z0-9]+(\w)?/g, (_m, c: string | undefined) => (c ?? '').toUpperCase())}`,
    summary: doc.summary,
    ...(doc.description ? { description: doc.description } : {}),
    tags: doc.tags,
    security: doc.security === 'none' ? [] : [{ [doc.security]: [] }],
    ...(doc.params || doc.query || doc.headers
      ? { requestParams: { ...(doc.params ? { path: doc.params } : {}), ...(doc.query ? { query: doc.query } : {}), ...(doc.headers ? { header: doc.headers } : {}) } }
      : {}),
    ...(doc.body
      ? {
        requestBody: {
          required: doc.body.required ?? true,
          content: { [doc.body.contentType ?? 'application/json']: { schema: doc.body.schema, ...(doc.body.example !== undefined ? { example: doc.body.example } : {}) } },
        },
      }
      : {}),
    responses,
  };
}

/**
 * The OpenAPI 3.1 document of `service` from its route docs: Express `:param` paths become
 * `{param}`, the security schemes the routes use are declared, error responses reference the
 * shape components (ErrorA/B/C), and every zod schema is rendered by zod-openapi (request
 * schemas as input, response schemas as output).
 * @throws Error when two docs name one method and path, or a doc's params do not match its path.
 */
export function buildOpenApiDocument(service: ServiceName, routeDocs: RouteDoc[], version = PACKAGE_VERSION): Record<string, any> {
  const info = SERVICE_INFO[service];
  const paths: NonNullable<ZodOpenApiObject['paths']> = {};
  const usedSchemes = new Set<keyof typeof SECURITY_SCHEMES>();
  for (const doc of routeDocs) {
    const key = openApiPath(doc.path);
    const item = (paths[key] ??= {}) as Record<string, ZodOpenApiOperationObject>;
    const method = doc.method.toLowerCase();
    if (item[method]) throw new Error(`${doc.method} ${doc.path} is documented twice`);
    item[method] = operationOf(doc, info.errorShape);
    if (doc.security !== 'none') usedSchemes.add(doc.security);
  }
  const tags = [...new Set(routeDocs.flatMap((d) => d.tags))].map((name) => ({ name }));
  return createDocument({
    openapi: '3.1.0',
    info: { title: info.title, version, description: info.description, license: { name: 'MIT', identifier: 'MIT' } },
    tags,
    paths,
    components: {
      securitySchemes: Object.fromEntries([...usedSchemes].map((s) => [s, SECURITY_SCHEMES[s]])),
    },
  });
}

const require = createRequire(import.meta.url);
/** Folder of the swagger-ui-dist package (served at /docs/assets, never from a CDN). */
const SWAGGER_UI_DIR = path.dirname(require.resolve('swagger-ui-dist/package.json'));

/** The reference page: Swagger UI reading this service's /openapi.json. */
function docsPage(title: string): string {
  const escaped = title.replace(/[&<>"]/g, (c) => `&#${c.charCodeAt(0)};`);
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>${escaped}</title>
<link rel="stylesheet" href="/docs/assets/swagger-ui.css">
</head>
<body>
<div id="swagger-ui"></div>
<script src="/docs/assets/swagger-ui-bundle.js"></script>
<script>
window.ui = SwaggerUIBundle({ url: '/openapi.json', dom_id: '#swagger-ui', deepLinking: true, validatorUrl: null });
</script>
</body>
</html>
`;
}

/**
 * `GET /openapi.json` (the document, built once per process) and `GET /docs` (Swagger UI, its
 * assets under /docs/assets/ from node_modules): public, no credential. Mount before the
 * service's auth middleware.
 */
export function openApiRoutes(service: ServiceName, routeDocs: RouteDoc[]): Router {
  const document = buildOpenApiDocument(service, routeDocs);
  const json = JSON.stringify(document);
  const page = docsPage(SERVICE_INFO[service].title);
  const router = Router();
  router.get('/openapi.json', (_req, res) => {
    res.type('application/json').send(json);
  });
  router.get('/docs', (_req, res) => {
    res.type('html').send(page);
  });
  router.use('/docs/assets', express.static(SWAGGER_UI_DIR, { index: false, fallthrough: true, maxAge: '1h' }));
  return router;
}

/** Docs of the routes `openApiRoutes` mounts. */
export const openApiRouteDocs: RouteDoc[] = [
  {
    method: 'GET', path: '/openapi.json', summary: 'This OpenAPI 3.1 document', tags: ['reference'], security: 'none',
    responses: { 200: { description: 'The OpenAPI document', schema: z.looseObject({ openapi: z.string(), info: z.looseObject({}), paths: z.looseObject({}) }) } },
  },
  {
    method: 'GET', path: '/docs', summary: 'API reference page (Swagger UI, works offline)', tags: ['reference'], security: 'none',
    responses: { 200: { description: 'An HTML page', content: [{ type: 'text/html', schema: z.string() }] } },
  },
];
