/**
 * OpenAPI documents (issue 16; api/http/openapi.ts): each service serves at `GET /openapi.json`,
 * without a credential, a valid OpenAPI 3.1 document naming exactly the routes it mounts; `ldp
 * openapi` prints the same document without a running instance; and real exchanges — search,
 * flat search, relevance, discover, match score, items, bulk uploads, template, health; the auth
 * group, signup, guardian signup, actions, support, registration links, public registration and
 * its form page, saved mappings, dry runs, dashboard and voice jobs — conform to it (request and
 * response bodies validated by Ajv, draft 2020-12).
 */
import { randomUUID } from 'node:crypto';
import { Validator } from '@seriousme/openapi-schema-validator';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API_EXAMPLES, openApiPath } from '../../api/http/openapi.ts';
import type { ServiceName } from '../../api/http/service-app.ts';
import { csv, startUpload, waitForJob, createUpload } from '../helpers/bulk-upload.ts';
import { signBody } from '../../lib/aggregator/voice/signature.ts';
import { voiceProviderSecret } from '../../lib/aggregator/voice/provider.ts';
import { itemPerson } from '../../lib/clients/signals-client.ts';
import { runLdp } from '../helpers/cli.ts';
import { codeOf, readOutbox, waitForMessage } from '../helpers/messages.ts';
import { discoverItems, storeItems, waitForIndex, type DiscoverItems } from '../helpers/discover-items.ts';
import { recordExchanges, type Exchange } from '../helpers/exchange-recorder.ts';
import { findOperation, OpenApiChecker } from '../helpers/openapi-check.ts';
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

/**
 * The operator console (`/console/…`, issue 18) is a web interface of HTML pages and form posts
 * behind its own session cookie, not part of the HTTP API the documents describe
 * (docs/decisions.md, "OpenAPI"); its routes are left out of the comparison.
 */
const NOT_API = /^\/console(\/|$)/;

const SERVICES: ServiceName[] = ['signals', 'search', 'aggregator'];

let platform: TestPlatform;
const apps = new Map<ServiceName, MountedRoute[]>();
const documents = new Map<ServiceName, Record<string, any>>();

beforeAll(async () => {
  platform = await startTestPlatform({ worker: true, env: { EMBEDDING_PROVIDER: 'hashing' } });
  for (const service of SERVICES) {
    apps.set(service, mountedRoutes(appOf(platform.services.find((s) => s.name === service)!.server)).filter((r) => !NOT_API.test(r.path)));
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

  it('validates real exchanges of people, auth, actions, support, links, public registration, mappings, previews, dashboard and voice', async () => {
    const first = exchanges.length;
    const signals = request(platform.url('signals'));
    const aggregator = request(platform.url('aggregator'));
    const signalsKey = await platform.apiKey('signals');
    const agg = await platform.aggregator();
    const bearer = `Bearer ${agg.token}`;
    const statuses: number[] = [];
    const send = async (res: request.Response | Promise<request.Response>) => {
      const answered = await res;
      statuses.push(answered.status);
      expect(answered.status, answered.text?.slice(0, 300)).toBeLessThan(500);
      return answered;
    };

    // Signals: the auth group (no key), signup (errors in shape B), guardian signup, precheck, a code login.
    await send(signals.get('/api/v1/auth/config'));
    await send(signals.get('/api/v1/auth/session/login'));
    expect((await send(signals.post('/api/v1/auth/signup').set('x-api-key', signalsKey).send(API_EXAMPLES.signup as object))).status).toBe(201);
    expect((await send(signals.post('/api/v1/auth/signup').set('x-api-key', signalsKey).send(API_EXAMPLES.signup as object))).status).toBe(200);
    expect((await send(signals.post('/api/v1/auth/signup').set('x-api-key', signalsKey).send({ name: 'Kid', email: 'kid@example.in', age: 12 }))).status).toBe(409);
    expect((await send(signals.post('/api/v1/auth/signup').set('x-api-key', signalsKey).send({ name: '' }))).body).toMatchObject({ code: expect.any(String), error: 'Bad Request' });
    expect((await send(signals.post('/api/v1/consent/u18/signup/guardian').set('x-api-key', signalsKey).send(API_EXAMPLES.guardian_signup as object))).status).toBe(201);
    expect((await send(signals.post('/api/v1/auth/u18-precheck').set('x-api-key', signalsKey).send(API_EXAMPLES.u18_precheck as object))).status).toBe(200);
    const email = (API_EXAMPLES.signup as { email: string }).email;
    const start = await send(signals.get('/api/v1/auth/session/login').query({ email }).set('accept', 'application/json'));
    expect(start.status).toBe(202);
    const code = codeOf(await waitForMessage(() => readOutbox(platform.dataDir), email, 1)); // the first message is the welcome e-mail
    const loginCookie = String(start.headers['set-cookie'][0]).split(';')[0]; // ldp_login: the callback needs it
    const login = await send(signals.get('/api/v1/auth/session/callback').query({ state: start.body.state, code }).set('accept', 'application/json').set('cookie', loginCookie));
    expect(login.status).toBe(200);
    const cookie = String(login.headers['set-cookie'][0]).split(';')[0];
    expect((await send(signals.get('/api/v1/auth/session').set('cookie', cookie))).status).toBe(200);
    expect((await send(signals.get('/api/v1/auth/me').set('authorization', `Bearer ${login.body.access_token}`))).status).toBe(200);
    expect((await send(signals.get('/api/v1/auth/me').set('authorization', bearer))).body.kind).toBe('aggregator');
    expect((await send(signals.post('/api/v1/auth/session/logout').set('cookie', cookie))).status).toBe(200);
    expect((await send(signals.get('/api/v1/auth/session'))).status).toBe(401);
    expect((await send(signals.get('/api/v1/auth/session/callback').query({ state: 'gone', code: '123456' }))).status).toBe(400);

    // Actions: a seeker applies to an onboarded provider, the provider accepts; refusals carry the results envelope.
    const seeker = { item_network: 'local-discovery', item_domain: 'seeker', item_type: 'seeker_profile', item_id: randomUUID(), item_state: { skills: ['electrician'], district: 'Kaithal', state: 'Haryana' } };
    const provider = { item_network: 'local-discovery', item_domain: 'provider', item_type: 'facility', item_id: randomUUID(), item_state: { name: 'ITI Kaithal', category: 'Education', district: 'Kaithal', state: 'Haryana', latitude: 29.8, longitude: 76.4 } };
    for (const [item, person] of [[seeker, { name: 'Asha Rani', phone: '+919812345678' }], [provider, { name: 'ITI desk', email: 'desk@iti-kaithal.example' }]] as const) {
      expect((await send(signals.put(`/api/v1/items/${item.item_id}`).set('x-api-key', signalsKey)
        .send({ ...item, created_by: `aggregator:${agg.aggregatorId}`, person: itemPerson(platform.ctx.pii, person) }))).status).toBe(201);
    }
    const ref = (i: { item_network: string; item_domain: string; item_type: string; item_id: string }) => ({ item_network: i.item_network, item_domain: i.item_domain, item_type: i.item_type, item_id: i.item_id });
    const apply = { action_type: 'apply', source_item: ref(seeker), target_item: { ...ref(provider), item_instance_url: 'http://aggregator.example/participants' }, consent: { acknowledged: true, version: 1 } };
    // The onboarding aggregator's token: the API key alone performs and moves nothing (docs/decisions.md, "The actor policy (actions)").
    const performed = await send(signals.post('/api/v1/action/perform').set('x-api-key', signalsKey).set('authorization', bearer).send(apply));
    expect(performed.status).toBe(201);
    const actionId = performed.body.results[0].action_id;
    expect((await send(signals.post('/api/v1/action/perform').set('x-api-key', signalsKey).set('authorization', bearer).send(apply))).status).toBe(409);
    expect((await send(signals.post('/api/v1/action/perform').set('x-api-key', signalsKey).set('authorization', bearer).send({ ...apply, source_item: { ...ref(seeker), item_id: randomUUID() } }))).status).toBe(404);
    expect((await send(signals.post(`/api/v1/action/${actionId}/status`).set('x-api-key', signalsKey).set('authorization', bearer).send({ action_status: 'accepted', update_count: 0 }))).status).toBe(200);
    expect((await send(signals.get(`/api/v1/action/${actionId}`).set('x-api-key', signalsKey))).status).toBe(200);
    expect((await send(signals.get(`/api/v1/action/${randomUUID()}`).set('x-api-key', signalsKey))).status).toBe(404);

    // Support on both services.
    expect((await send(signals.post('/api/v1/support').set('x-api-key', signalsKey).send(API_EXAMPLES.support as object))).status).toBe(200);
    expect((await send(aggregator.post('/v1/support').set('authorization', bearer).send({ ...(API_EXAMPLES.support as object), email: 'ops@example.in' }))).status).toBe(200);

    // Registration links and the public registration through one (201, 409, 400), its form page and QR code.
    const link = await send(aggregator.post('/v1/links/create').set('authorization', bearer).send(API_EXAMPLES.link as object));
    expect(link.status).toBe(201);
    const draft = await send(aggregator.post('/v1/links/create').set('authorization', bearer).send({ domain: 'seeker' }));
    expect((await send(aggregator.patch(`/v1/links/${draft.body.link_id}`).set('authorization', bearer).send({ context: { batch: 2 } }))).status).toBe(200);
    expect((await send(aggregator.post(`/v1/links/${draft.body.link_id}/activate`).set('authorization', bearer))).status).toBe(200);
    expect((await send(aggregator.post(`/v1/links/${draft.body.link_id}/retire`).set('authorization', bearer))).status).toBe(200);
    expect((await send(aggregator.post(`/v1/links/${draft.body.link_id}/activate`).set('authorization', bearer))).status).toBe(409);
    expect((await send(aggregator.get(`/v1/links/${link.body.link_id}`).set('authorization', bearer))).status).toBe(200);
    expect((await send(aggregator.get('/v1/links').query({ limit: '5' }).set('authorization', bearer))).status).toBe(200);
    const publicPath = `/public/v1/aggregators/${agg.orgSlug}/registrations/${link.body.slug}`;
    expect((await send(aggregator.get(publicPath))).status).toBe(200);
    expect((await send(aggregator.post(publicPath).send(API_EXAMPLES.public_registration as object))).status).toBe(201);
    expect((await send(aggregator.post(publicPath).send(API_EXAMPLES.public_registration as object))).status).toBe(409);
    expect((await send(aggregator.post(publicPath).send({ name: 'No phone' }))).status).toBe(400);
    expect((await send(aggregator.get(`/public/v1/aggregators/${agg.orgSlug}/registrations/no-such-link`))).status).toBe(404);
    const formPath = new URL(link.body.public_url).pathname;
    expect((await send(aggregator.get(formPath))).status).toBe(200);
    expect((await send(aggregator.get(`${formPath}/qr.svg`))).headers['content-type']).toMatch(/^image\/svg\+xml/);
    expect((await send(aggregator.post(formPath).type('form').send({ name: 'Form Only' }))).status).toBe(400);
    expect((await send(aggregator.post(formPath).type('form').send({ name: 'Ravi Form', phone: '98765 43299', state: 'Haryana', consent_terms: 'true', consent_privacy: 'true' }))).status).toBe(201);
    expect((await send(aggregator.get('/review/not-a-token'))).status).toBe(400);

    // Registration: organisations are off by default (404); an aggregator's token registers nothing.
    expect((await send(aggregator.post('/v1/orgs/create').send({}))).status).toBe(404);
    expect((await send(aggregator.post('/v1/aggregator-registrations/create').set('authorization', bearer).send({}))).status).toBe(409);
    expect((await send(aggregator.post('/v1/aggregator-registrations/token').set('authorization', bearer))).status).toBe(403);

    // Saved mappings, and match and dry run of a pending upload.
    const mapping = await send(aggregator.post('/v1/bulk-uploads/mappings').set('authorization', bearer).send(API_EXAMPLES.saved_mapping as object));
    expect(mapping.status).toBe(201);
    const mappingPath = `/v1/bulk-uploads/mappings/${mapping.body.id}`;
    expect((await send(aggregator.get(mappingPath).set('authorization', bearer))).status).toBe(200);
    expect((await send(aggregator.get('/v1/bulk-uploads/mappings').query({ participant_type: 'provider' }).set('authorization', bearer))).status).toBe(200);
    expect((await send(aggregator.put(mappingPath).set('authorization', bearer).send({ name: 'Kerala schools v2', mapping: { INSTNM: 'name' } }))).status).toBe(200);
    expect((await send(aggregator.delete(mappingPath).set('authorization', bearer))).status).toBe(204);
    expect((await send(aggregator.put(mappingPath).set('authorization', bearer).send({ mapping: { INSTNM: 'name' } }))).status).toBe(409);
    const upload = await createUpload(platform, agg.token, {
      participantType: 'seeker', file: csv(['Full name', 'Mobile', 'skills', 'district', 'state'], [['Asha Rani', '+919812345670', 'tailoring', 'Kaithal', 'Haryana']]),
    });
    expect(upload.status).toBe(201);
    const uploadPath = `/v1/bulk-uploads/${upload.body.upload_id}`;
    expect((await send(aggregator.post(`${uploadPath}/match`).set('authorization', bearer))).status).toBe(200);
    const preview = await send(aggregator.post(`${uploadPath}/preview`).set('authorization', bearer).send({ rows: 10 }));
    expect([200, 202]).toContain(preview.status);
    expect((await send(aggregator.get(`${uploadPath}/previews/${preview.body.preview_id}`).set('authorization', bearer))).status).toBe(200);

    // Dashboard: the rollup computed by the worker (or the documented 503 while it is), and an export.
    let dashboard = await send(aggregator.get('/v1/dashboard').query({ limit: '5' }).set('authorization', bearer));
    for (let i = 0; i < 60 && dashboard.status === 503; i++) {
      await new Promise((resolve) => setTimeout(resolve, 500));
      dashboard = await send(aggregator.get('/v1/dashboard').query({ limit: '5' }).set('authorization', bearer));
    }
    expect(dashboard.status).toBe(200);
    const exported = await send(aggregator.post('/v1/dashboard/export/profiles').set('authorization', bearer).send({ item_ids: [randomUUID()] }));
    expect(exported.headers['content-type']).toMatch(/^text\/csv/);

    // Voice: a job, its page and 304, the list, a signed and an unsigned callback, an export not ready.
    const job = await send(aggregator.post('/v1/campaign/voice').set('authorization', bearer).set('idempotency-key', randomUUID()).send(API_EXAMPLES.voice_job as object));
    expect(job.status).toBe(202);
    // The worker dispatches the job meanwhile (its version moves): ask again until the job settles and answers 304.
    let unchanged = 0;
    for (let i = 0; i < 100 && unchanged !== 304; i++) {
      const jobPage = await send(aggregator.get(`/v1/campaign/voice/${job.body.job_id}`).set('authorization', bearer));
      expect(jobPage.status).toBe(200);
      unchanged = (await send(aggregator.get(`/v1/campaign/voice/${job.body.job_id}`).set('authorization', bearer).set('if-none-match', jobPage.headers.etag))).status;
      if (unchanged !== 304) await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(unchanged).toBe(304);
    expect((await send(aggregator.get('/v1/campaign/voice').set('authorization', bearer))).status).toBe(200);
    const callback = JSON.stringify({ updates: [{ idempotency_key: `${job.body.job_id}:${randomUUID()}`, provider_ref: 'call-1', status: 'sent' }] });
    const signature = signBody(await voiceProviderSecret(platform.ctx.config), callback);
    expect((await send(aggregator.post('/v1/campaign/voice/callbacks').set('content-type', 'application/json').set('x-voice-signature', signature).send(callback))).status).toBe(200);
    expect((await send(aggregator.post('/v1/campaign/voice/callbacks').send({ updates: [] }))).status).toBe(401);
    expect((await send(aggregator.get(`/v1/campaign/exports/${job.body.job_id}`).set('authorization', bearer))).status).toBe(403);

    const mine = exchanges.slice(first);
    expect(mine.length).toBeGreaterThan(statuses.length); // and the multipart upload, and what the worker sends to signals
    const problems = mine.flatMap((e) => {
      const checker = checkers.get(e.service) ?? checkers.set(e.service, new OpenApiChecker(documents.get(e.service)!)).get(e.service)!;
      return checker.check(e).map((p) => `${e.service} ${e.method} ${e.path} → ${e.status}: ${p}`);
    });
    expect(problems).toEqual([]);

    // Each route was reached with the statuses meant, and the checker does see a departure in these bodies.
    const seen = new Set(mine.map((e) => `${e.service} ${e.method} ${findOperation(documents.get(e.service)!, e.method, e.path)?.template} ${e.status}`));
    for (const expected of [
      'signals GET /api/v1/auth/config 200', 'signals GET /api/v1/auth/session/login 200', 'signals GET /api/v1/auth/session/login 202',
      'signals GET /api/v1/auth/session/callback 200', 'signals GET /api/v1/auth/session/callback 400', 'signals GET /api/v1/auth/session 200',
      'signals GET /api/v1/auth/session 401', 'signals GET /api/v1/auth/me 200', 'signals POST /api/v1/auth/session/logout 200',
      'signals POST /api/v1/auth/signup 201', 'signals POST /api/v1/auth/signup 200', 'signals POST /api/v1/auth/signup 409', 'signals POST /api/v1/auth/signup 400',
      'signals POST /api/v1/consent/u18/signup/guardian 201', 'signals POST /api/v1/auth/u18-precheck 200',
      'signals POST /api/v1/action/perform 201', 'signals POST /api/v1/action/perform 409', 'signals POST /api/v1/action/perform 404',
      'signals POST /api/v1/action/{id}/status 200', 'signals GET /api/v1/action/{id} 200', 'signals GET /api/v1/action/{id} 404', 'signals POST /api/v1/support 200',
      'aggregator POST /v1/support 200', 'aggregator POST /v1/links/create 201', 'aggregator PATCH /v1/links/{id} 200', 'aggregator POST /v1/links/{id}/activate 200',
      'aggregator POST /v1/links/{id}/activate 409', 'aggregator POST /v1/links/{id}/retire 200', 'aggregator GET /v1/links/{id} 200', 'aggregator GET /v1/links 200',
      'aggregator GET /public/v1/aggregators/{orgSlug}/registrations/{slug} 200', 'aggregator GET /public/v1/aggregators/{orgSlug}/registrations/{slug} 404',
      'aggregator POST /public/v1/aggregators/{orgSlug}/registrations/{slug} 201', 'aggregator POST /public/v1/aggregators/{orgSlug}/registrations/{slug} 409',
      'aggregator POST /public/v1/aggregators/{orgSlug}/registrations/{slug} 400', 'aggregator GET /r/{orgSlug}/{slug} 200', 'aggregator GET /r/{orgSlug}/{slug}/qr.svg 200',
      'aggregator POST /r/{orgSlug}/{slug} 400', 'aggregator POST /r/{orgSlug}/{slug} 201', 'aggregator GET /review/{token} 400', 'aggregator POST /v1/orgs/create 404',
      'aggregator POST /v1/aggregator-registrations/create 409', 'aggregator POST /v1/aggregator-registrations/token 403',
      'aggregator POST /v1/bulk-uploads/mappings 201', 'aggregator GET /v1/bulk-uploads/mappings/{id} 200', 'aggregator GET /v1/bulk-uploads/mappings 200',
      'aggregator PUT /v1/bulk-uploads/mappings/{id} 200', 'aggregator DELETE /v1/bulk-uploads/mappings/{id} 204', 'aggregator PUT /v1/bulk-uploads/mappings/{id} 409',
      'aggregator POST /v1/bulk-uploads/{id}/match 200', 'aggregator GET /v1/bulk-uploads/{id}/previews/{previewId} 200', 'aggregator GET /v1/dashboard 200', 'aggregator POST /v1/dashboard/export/profiles 200',
      'aggregator POST /v1/campaign/voice 202', 'aggregator GET /v1/campaign/voice/{job_id} 200', 'aggregator GET /v1/campaign/voice/{job_id} 304',
      'aggregator GET /v1/campaign/voice 200', 'aggregator POST /v1/campaign/voice/callbacks 200', 'aggregator POST /v1/campaign/voice/callbacks 401',
      'aggregator GET /v1/campaign/exports/{job_id} 403',
    ]) expect(seen, expected).toContain(expected);
    const linkCreated = mine.find((e) => e.path === '/v1/links/create' && e.status === 201)!;
    const json = (v: unknown) => Buffer.from(JSON.stringify(v));
    const checker = checkers.get('aggregator')!;
    expect(checker.check({ ...linkCreated, responseBody: json({ ...JSON.parse(linkCreated.responseBody.toString()), status: 'open' }) }).join()).toMatch(/response body/);
    const registered = mine.find((e) => e.path.startsWith('/public/') && e.status === 201)!;
    expect(checker.check({ ...registered, responseBody: json({ ...JSON.parse(registered.responseBody.toString()), outcome: 'skipped' }) }).join()).toMatch(/response body/);
    const signup = mine.find((e) => e.path === '/api/v1/auth/signup' && e.status === 400)!;
    expect(checkers.get('signals')!.check({ ...signup, responseBody: json({ error: 'invalid_request', message: 'shape A' }) }).join()).toMatch(/response body/);
  }, 180_000);

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
