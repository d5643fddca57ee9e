/**
 * OpenAPI documents (issue 16; api/http/openapi.ts): each service serves at `GET /openapi.json`,
 * without a credential, a valid OpenAPI 3.1 document naming exactly the routes it mounts; `ldp
 * openapi` prints the same document without a running instance; and real exchanges — search,
 * flat search, relevance, discover, match score, items, bulk uploads, template, health — conform
 * to it (request and response bodies validated by Ajv, draft 2020-12).
 */
import { randomUUID } from 'node:crypto';
import { Validator } from '@seriousme/openapi-schema-validator';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API_EXAMPLES, openApiPath } from '../../api/http/openapi.ts';
import type { ServiceName } from '../../api/http/service-app.ts';
import { csv, startUpload, waitForJob, createUpload } from '../helpers/bulk-upload.ts';
import { runLdp } from '../helpers/cli.ts';
import { discoverItems, storeItems, waitForIndex, type DiscoverItems } from '../helpers/discover-items.ts';
import { recordExchanges, type Exchange } from '../helpers/exchange-recorder.ts';
import { OpenApiChecker } from '../helpers/openapi-check.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';
import { appOf, mountedRoutes, type MountedRoute } from '../helpers/routes.ts';

/**
 * Routes mounted but not documented yet, as `METHOD /express/:path` per service. This list may only
 * shrink: the test fails when a route listed here gets documented or is no longer mounted. To
 * document a route, add a RouteDoc beside its router (README, "How to document a route").
 */
const NOT_YET_DOCUMENTED: Record<ServiceName, string[]> = {
  signals: [],
  search: [],
  aggregator: [],
};

const SERVICES: ServiceName[] = ['signals', 'search', 'aggregator'];

let platform: TestPlatform;
const apps = new Map<ServiceName, MountedRoute[]>();
const documents = new Map<ServiceName, Record<string, any>>();

beforeAll(async () => {
  platform = await startTestPlatform({ worker: true, env: { EMBEDDING_PROVIDER: 'hashing' } });
  for (const service of SERVICES) {
    apps.set(service, mountedRoutes(appOf(platform.services.find((s) => s.name === service)!.server)));
    const res = await request(platform.url(service)).get('/openapi.json');
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toMatch(/^application\/json/);
    documents.set(service, res.body);
  }
});
afterAll(() => platform?.stop());

const routeKey = (method: string, expressPath: string) => `${method.toUpperCase()} ${openApiPath(expressPath)}`;
const documentedRoutes = (doc: Record<string, any>) => Object.entries<Record<string, unknown>>(doc.paths)
  .flatMap(([path, item]) => Object.keys(item).filter((k) => ['get', 'put', 'post', 'delete', 'patch'].includes(k)).map((m) => `${m.toUpperCase()} ${path}`));

describe.each(SERVICES)('the %s service’s OpenAPI document', (service) => {
  it('names every mounted route, and only mounted routes (NOT_YET_DOCUMENTED may only shrink)', () => {
    const mounted = new Set(apps.get(service)!.map((r) => routeKey(r.method, r.path)));
    const documented = new Set(documentedRoutes(documents.get(service)!));
    const listed = new Set(NOT_YET_DOCUMENTED[service].map((r) => routeKey(r.split(' ')[0], r.split(' ')[1])));
    expect(mounted.size).toBeGreaterThan(3);
    expect([...mounted].filter((r) => !documented.has(r) && !listed.has(r)), 'mounted but not documented').toEqual([]);
    expect([...documented].filter((r) => !mounted.has(r)), 'documented but not mounted').toEqual([]);
    expect([...listed].filter((r) => documented.has(r)), 'documented now: remove from NOT_YET_DOCUMENTED').toEqual([]);
    expect([...listed].filter((r) => !mounted.has(r)), 'no longer mounted: remove from NOT_YET_DOCUMENTED').toEqual([]);
  });

  it('is a valid OpenAPI 3.1 document with the service’s security scheme, error shapes and valid examples', async () => {
    const doc = documents.get(service)!;
    const result = await new Validator().validate(doc);
    expect(result.errors ?? [], JSON.stringify(result.errors)).toEqual([]);
    expect(result.valid).toBe(true);
    expect(doc.openapi).toMatch(/^3\.1\./);
    if (service === 'aggregator') {
      expect(doc.components.securitySchemes.bearer).toMatchObject({ type: 'http', scheme: 'bearer', bearerFormat: 'JWT' });
      expect(doc.components.schemas.ErrorC.properties.error.required).toEqual(expect.arrayContaining(['code', 'title', 'detail', 'requestId', 'timestamp']));
      expect(doc.paths['/v1/bulk-uploads/{id}'].get.responses['404'].content['application/json'].schema).toEqual({ $ref: '#/components/schemas/ErrorC' });
      expect(doc.paths['/v1/bulk-uploads'].post.requestBody.content).toHaveProperty('multipart/form-data');
    } else {
      expect(doc.components.securitySchemes.apiKey).toEqual(expect.objectContaining({ type: 'apiKey', in: 'header', name: 'x-api-key' }));
      expect(doc.components.schemas.ErrorA.required).toEqual(['error', 'message']);
    }
    // Public routes carry no security requirement; the others name the service's scheme.
    expect(doc.paths['/openapi.json'].get.security).toEqual([]);
    const secured = service === 'aggregator' ? doc.paths['/v1/me'].get : doc.paths[service === 'search' ? '/v1/search' : '/api/v1/network/item/discover'].post;
    expect(secured.security).toEqual([{ [service === 'aggregator' ? 'bearer' : 'apiKey']: [] }]);
    expect(new OpenApiChecker(doc).checkExamples()).toEqual([]);
  });

  it('is printed identically by `ldp openapi` without a running instance', async () => {
    const printed = await runLdp(['openapi', '--service', service], { DATA_DIR: platform.dataDir, DATABASE_URL: 'postgres://nobody@127.0.0.1:1/none' });
    expect(printed.stderr).toBe('');
    expect(printed.code).toBe(0);
    expect(JSON.parse(printed.stdout)).toEqual(documents.get(service));
  });
});

describe('the documents say what the services answer', () => {
  const exchanges: Exchange[] = [];
  let items: DiscoverItems;

  beforeAll(async () => {
    for (const service of SERVICES) recordExchanges(platform.services.find((s) => s.name === service)!.server, service, exchanges);
  });

  it('validates the request and response bodies of representative real exchanges', async () => {
    const signals = request(platform.url('signals'));
    const search = request(platform.url('search'));
    const aggregator = request(platform.url('aggregator'));
    const signalsKey = await platform.apiKey('signals');
    const searchKey = await platform.apiKey('search');
    const { token } = await platform.aggregator();
    const bearer = `Bearer ${token}`;

    // Items: create through the API, then wait for the worker to index them for search.
    items = discoverItems();
    await storeItems(platform.url('signals'), signalsKey, items);
    const ids = [items.electrician.item_id, items.kaithalIti.item_id, items.karoraSchool.item_id, items.rajoundPhc.item_id];
    await waitForIndex(platform.ctx.pool, ids);
    const sent = [
      await signals.put(`/api/v1/items/${items.kaithalIti.item_id}`).set('x-api-key', signalsKey).send({ ...items.kaithalIti, item_id: undefined }),
      await signals.post('/api/v1/items/batch').set('x-api-key', signalsKey).send({ items: [items.pundriSchool, { item_id: 'nope' }] }),
      await signals.get(`/api/v1/items/${items.rajoundPhc.item_id}`).set('x-api-key', signalsKey),
      await signals.get(`/api/v1/items/${randomUUID()}`).set('x-api-key', signalsKey),
      await signals.post(`/api/v1/items/${items.ambalaBusStand.item_id}/lifecycle`).set('x-api-key', signalsKey).send({ lifecycle_status: 'paused' }),
      await signals.get('/api/v1/items').query({ limit: '3' }).set('x-api-key', signalsKey),
      await signals.post('/api/v1/network/item/discover').set('x-api-key', signalsKey)
        .send({ item_network: 'local-discovery', item_domain: 'provider', item_type: 'facility', q: 'school', item_latitude: 29.8015, item_longitude: 76.3998, distance_meters: 50000, sort: 'nearest', limit: 5 }),
      await signals.post('/api/v1/network/item/discover').set('x-api-key', signalsKey).send({ item_network: 'local-discovery' }),
      await signals.post('/api/v1/match-score/calculate').set('x-api-key', signalsKey).send({
        itemA: { ...items.electrician, item_instance_url: null, item_schema_url: null },
        itemB: { ...items.kaithalIti, item_instance_url: 'https://example.in/items', item_schema_url: null },
      }),
      await signals.post('/api/v1/match-score/calculate').set('x-api-key', 'ldp_signals_wrong').send({}),
      await search.post('/v1/search').set('x-api-key', searchKey).send({
        context: { messageId: 'm1', networkId: 'local-discovery', domain: 'provider', itemType: 'facility' },
        message: {
          intent: { textSearch: 'training', spatial: [{ op: 's_dwithin', geometry: { type: 'Point', coordinates: [76.3998, 29.8015] }, distanceMeters: 50000 }] },
          pagination: { limit: 5 },
        },
      }),
      await search.post('/v1/search').set('x-api-key', searchKey).send({ context: {}, message: {} }),
      await search.post('/v1/search/flat').set('x-api-key', searchKey).send({
        'context.messageId': 'm2', 'context.networkId': 'local-discovery', 'context.domain': 'provider', 'context.itemType': 'facility',
        'message.intent.filters.0.op': 'eq', 'message.intent.filters.0.target': 'item_state.district', 'message.intent.filters.0.value': 'Kaithal',
        'message.intent.sort': 'newest', 'message.pagination.limit': '3',
      }),
      await search.post('/v1/relevance').set('x-api-key', searchKey).send({
        source: { network: 'local-discovery', domain: 'seeker', type: 'seeker_profile', id: items.electrician.item_id },
        target: { network: 'local-discovery', domain: 'provider', type: 'facility', id: items.kaithalIti.item_id },
      }),
      await search.post('/v1/relevance').set('x-api-key', searchKey).send({
        source: { network: 'local-discovery', domain: 'seeker', type: 'seeker_profile', id: randomUUID() },
        target: { network: 'local-discovery', domain: 'provider', type: 'facility', id: items.kaithalIti.item_id },
      }),
      await search.post('/v1/index/entries').set('x-api-key', platform.ctx.internalApiKey).send({ ids: [items.karoraSchool.item_id] }),
      await aggregator.get('/v1/me').set('authorization', bearer),
      await aggregator.get('/v1/bulk-uploads/template').query({ participant_type: 'seeker', format: 'csv' }).set('authorization', bearer),
      await aggregator.get('/v1/bulk-uploads/template').query({ participant_type: 'provider', format: 'xlsx' }).set('authorization', bearer)
        .buffer(true).parse((res, done) => { const parts: Buffer[] = []; res.on('data', (c: Buffer) => parts.push(c)); res.on('end', () => done(null, Buffer.concat(parts))); }),
      await aggregator.get('/v1/bulk-uploads/template').query({ format: 'pdf' }).set('authorization', bearer),
      await aggregator.get('/.well-known/jwks.json'),
    ];
    for (const res of sent) expect(res.status, res.text?.slice(0, 300)).toBeLessThan(500);

    // The documents' examples (fixtures/api-examples.json) are real requests the services accept.
    const exampleId = randomUUID();
    const examples = [
      await signals.put(`/api/v1/items/${exampleId}`).set('x-api-key', signalsKey).send(API_EXAMPLES.item as object),
      await signals.post(`/api/v1/items/${exampleId}/lifecycle`).set('x-api-key', signalsKey).send(API_EXAMPLES.lifecycle as object),
      await signals.post('/api/v1/network/item/discover').set('x-api-key', signalsKey).send(API_EXAMPLES.discover as object),
      await search.post('/v1/search').set('x-api-key', searchKey).send(API_EXAMPLES.search as object),
      await search.post('/v1/search/flat').set('x-api-key', searchKey).send(API_EXAMPLES.search_flat as object),
    ];
    expect(examples.map((r) => r.status), examples.map((r) => r.text.slice(0, 200)).join('\n')).toEqual([201, 200, 200, 200, 200]);

    // A bulk upload: create (multipart), read, list, start, wait for the worker, read its error report.
    const created = await createUpload(platform, token, {
      participantType: 'seeker',
      file: csv(['name', 'phone', 'skills', 'district', 'state'], [
        ['Asha Rani', '+919812345670', 'tailoring|embroidery', 'Kaithal', 'Haryana'],
        ['No Phone', 'not a phone', 'driving', 'Kaithal', 'Haryana'],
      ]),
    });
    expect(created.status, created.text).toBe(201);
    const uploadId = created.body.upload_id;
    expect((await aggregator.get(`/v1/bulk-uploads/${uploadId}`).set('authorization', bearer)).status).toBe(200);
    expect((await aggregator.get('/v1/bulk-uploads').query({ limit: '5' }).set('authorization', bearer)).status).toBe(200);
    expect((await aggregator.post(`/v1/bulk-uploads/${uploadId}/start`).set('authorization', bearer).send({ attestation: false })).status).toBe(400);
    expect((await startUpload(platform, token, uploadId)).status).toBe(200);
    const done = await waitForJob(platform, token, uploadId);
    expect(done.status).toBe('completed');
    expect((await aggregator.get(`/v1/bulk-uploads/${uploadId}/errors`).set('authorization', bearer)).status).toBe(200);
    expect((await aggregator.get(`/v1/bulk-uploads/${randomUUID()}`).set('authorization', bearer)).status).toBe(404);
    expect((await aggregator.get('/v1/me')).status).toBe(401);

    // Operations of every service, reference and health routes too.
    for (const service of SERVICES) {
      const base = request(platform.url(service));
      expect((await base.get('/health')).status).toBe(200);
      expect([200, 503]).toContain((await base.get('/ready')).status);
      expect((await base.get('/metrics')).status).toBe(200);
      expect((await base.get('/docs')).status).toBe(200);
    }

    const problems = exchanges.flatMap((e) => {
      const checker = checkers.get(e.service) ?? checkers.set(e.service, new OpenApiChecker(documents.get(e.service)!)).get(e.service)!;
      return checker.check(e).map((p) => `${e.service} ${e.method} ${e.path} → ${e.status}: ${p}`);
    });
    expect(problems).toEqual([]);

    // The exchanges reached the operations they were meant to, with the statuses expected.
    const seen = new Set(exchanges.map((e) => `${e.service} ${e.method} ${e.path.replace(/[0-9a-f]{8}-[0-9a-f-]{27}/g, '{id}')} ${e.status}`));
    for (const expected of [
      'signals PUT /api/v1/items/{id} 200', 'signals PUT /api/v1/items/{id} 201', 'signals POST /api/v1/items/batch 200',
      'signals GET /api/v1/items/{id} 200', 'signals GET /api/v1/items/{id} 404', 'signals POST /api/v1/items/{id}/lifecycle 200',
      'signals GET /api/v1/items 200', 'signals POST /api/v1/network/item/discover 200', 'signals POST /api/v1/network/item/discover 400',
      'signals POST /api/v1/match-score/calculate 200', 'signals POST /api/v1/match-score/calculate 401',
      'search POST /v1/search 200', 'search POST /v1/search 400', 'search POST /v1/search/flat 200', 'search POST /v1/relevance 200',
      'search POST /v1/relevance 404', 'search POST /v1/index/entries 200',
      'aggregator GET /v1/me 200', 'aggregator GET /v1/me 401', 'aggregator GET /v1/bulk-uploads/template 200', 'aggregator GET /v1/bulk-uploads/template 400',
      'aggregator POST /v1/bulk-uploads 201', 'aggregator GET /v1/bulk-uploads/{id} 200', 'aggregator GET /v1/bulk-uploads/{id} 404',
      'aggregator GET /v1/bulk-uploads 200', 'aggregator POST /v1/bulk-uploads/{id}/start 200', 'aggregator POST /v1/bulk-uploads/{id}/start 400',
      'aggregator GET /v1/bulk-uploads/{id}/errors 200', 'aggregator GET /.well-known/jwks.json 200',
    ]) expect(seen, expected).toContain(expected);
  }, 120_000);

  it('flags an exchange that departs from the document', () => {
    const checker = new OpenApiChecker(documents.get('search')!);
    const search = exchanges.find((e) => e.path === '/v1/search' && e.status === 200)!;
    expect(checker.check(search)).toEqual([]);
    const json = (v: unknown) => Buffer.from(JSON.stringify(v));
    const body = JSON.parse(search.responseBody.toString());
    expect(checker.check({ ...search, responseBody: json({ ...body, message: { ...body.message, meta: { total: '2' } } }) }).join())
      .toMatch(/response body/);
    expect(checker.check({ ...search, requestBody: { context: {}, message: {} } }).join()).toMatch(/request body/);
    expect(checker.check({ ...search, status: 418 }).join()).toMatch(/status 418 not documented/);
    expect(checker.check({ ...search, responseContentType: 'text/html' }).join()).toMatch(/content type text\/html not documented/);
    expect(checker.check({ ...search, path: '/v1/nowhere' })).toEqual(['route not documented']);
    const error = exchanges.find((e) => e.path === '/v1/search' && e.status === 400)!;
    expect(checker.check({ ...error, responseBody: json({ error: { code: 'invalid_request' } }) }).join()).toMatch(/response body/);
  });

  const checkers = new Map<ServiceName, OpenApiChecker>();
});
