/**
 * Tenant-isolation sweep (issue 15), one table over every Bearer route of the aggregator:
 * - another aggregator's ids, with its own valid admin token → 404 (403 for voice and export jobs,
 *   as the spec's voice job answers), and nothing of the owner's data in the body or headers; lists
 *   show none of it; the owner's records are unchanged afterwards;
 * - each role (admin, operator, viewer) allowed or refused (403 `insufficient_role`) per route, as
 *   the route modules document it (the matrix below);
 * - every mounted route is in the table or in the list of routes without a Bearer token, so a new
 *   route cannot escape the sweep.
 * And for the API-key services: every route that needs a key answers 401 to a revoked key and to
 * the other service's key.
 */
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ServiceName } from '../../api/http/service-app.ts';
import { createApiKey, revokeApiKey, type KeyService } from '../../lib/platform/api-keys.ts';
import { csv, createUpload, onboard } from '../helpers/bulk-upload.ts';
import { startTestPlatform, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';
import { appOf, mountedRoutes } from '../helpers/routes.ts';
import { createVoiceJob, seedSeekers } from '../helpers/voice.ts';

type Role = 'admin' | 'operator' | 'viewer';
const ALL: Role[] = ['admin', 'operator', 'viewer'];
const WRITERS: Role[] = ['admin', 'operator'];

/** The owner's ids, filled in beforeAll. */
const own = { upload: '', pending: '', preview: '', mapping: '', link: '', voice: '', export: '' };

interface RouteCase {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  path: string;
  /** Roles allowed; the others get 403 insufficient_role. */
  roles: Role[];
  /** The owner's resource as a concrete path (routes with ids), and what another aggregator gets. */
  target?: () => string;
  other?: 403 | 404;
  body?: object;
  headers?: Record<string, string>;
}

// Bodies valid enough to reach the ownership check.
const ROUTES: RouteCase[] = [
  { method: 'GET', path: '/v1/me', roles: ALL },
  { method: 'POST', path: '/v1/bulk-uploads', roles: WRITERS },
  { method: 'GET', path: '/v1/bulk-uploads', roles: ALL },
  { method: 'GET', path: '/v1/bulk-uploads/template', roles: ALL },
  { method: 'GET', path: '/v1/bulk-uploads/:id', roles: ALL, target: () => `/v1/bulk-uploads/${own.upload}`, other: 404 },
  { method: 'POST', path: '/v1/bulk-uploads/:id/start', roles: WRITERS, target: () => `/v1/bulk-uploads/${own.pending}/start`, other: 404, body: { attestation: true } },
  { method: 'POST', path: '/v1/bulk-uploads/:id/match', roles: WRITERS, target: () => `/v1/bulk-uploads/${own.pending}/match`, other: 404, body: {} },
  { method: 'POST', path: '/v1/bulk-uploads/:id/preview', roles: WRITERS, target: () => `/v1/bulk-uploads/${own.pending}/preview`, other: 404, body: { rows: 5 } },
  { method: 'GET', path: '/v1/bulk-uploads/:id/previews/:previewId', roles: WRITERS, target: () => `/v1/bulk-uploads/${own.pending}/previews/${own.preview}`, other: 404 },
  { method: 'GET', path: '/v1/bulk-uploads/:id/events', roles: ALL, target: () => `/v1/bulk-uploads/${own.upload}/events`, other: 404 },
  { method: 'GET', path: '/v1/bulk-uploads/:id/errors', roles: WRITERS, target: () => `/v1/bulk-uploads/${own.upload}/errors`, other: 404 },
  { method: 'POST', path: '/v1/bulk-uploads/mappings', roles: WRITERS },
  { method: 'GET', path: '/v1/bulk-uploads/mappings', roles: ALL },
  { method: 'GET', path: '/v1/bulk-uploads/mappings/:id', roles: ALL, target: () => `/v1/bulk-uploads/mappings/${own.mapping}`, other: 404 },
  { method: 'PUT', path: '/v1/bulk-uploads/mappings/:id', roles: WRITERS, target: () => `/v1/bulk-uploads/mappings/${own.mapping}`, other: 404, body: { name: 'Taken over', participant_type: 'seeker', mapping: { name: 'name' } } },
  { method: 'DELETE', path: '/v1/bulk-uploads/mappings/:id', roles: WRITERS, target: () => `/v1/bulk-uploads/mappings/${own.mapping}`, other: 404 },
  { method: 'GET', path: '/v1/dashboard', roles: ALL },
  { method: 'POST', path: '/v1/dashboard/export/profiles', roles: WRITERS },
  { method: 'POST', path: '/v1/links/create', roles: WRITERS },
  { method: 'GET', path: '/v1/links', roles: ALL },
  { method: 'GET', path: '/v1/links/:id', roles: ALL, target: () => `/v1/links/${own.link}`, other: 404 },
  { method: 'PATCH', path: '/v1/links/:id', roles: WRITERS, target: () => `/v1/links/${own.link}`, other: 404, body: { expires_at: null } },
  { method: 'POST', path: '/v1/links/:id/activate', roles: WRITERS, target: () => `/v1/links/${own.link}/activate`, other: 404, body: {} },
  { method: 'POST', path: '/v1/links/:id/retire', roles: WRITERS, target: () => `/v1/links/${own.link}/retire`, other: 404, body: {} },
  { method: 'POST', path: '/v1/support', roles: ALL },
  { method: 'POST', path: '/v1/campaign/voice', roles: WRITERS },
  { method: 'GET', path: '/v1/campaign/voice', roles: ALL },
  { method: 'GET', path: '/v1/campaign/voice/:job_id', roles: ALL, target: () => `/v1/campaign/voice/${own.voice}`, other: 403 },
  { method: 'GET', path: '/v1/campaign/exports/:job_id', roles: WRITERS, target: () => `/v1/campaign/exports/${own.export}`, other: 403 },
];

/** Aggregator routes without a Bearer token (public, signed links, callbacks, probes). */
const NOT_BEARER = [
  /^\/(health|ready|metrics)$/, /^\/\.well-known\//, /^\/public\//, /^\/v1\/aggregator-registrations\//, /^\/v1\/orgs\/create$/,
  /^\/review\//, /^\/r\//, /^\/v1\/campaign\/voice\/callbacks$/, /^\/$/,
  // The operator console: its own session cookie, roles and CSRF (test/aggregator/console.test.ts).
  /^\/console(\/|$)/, /^\/(openapi\.json|docs)/,
];

let platform: TestPlatform;
let owner: TestAggregator;
let intruder: TestAggregator;
const byRole = {} as Record<Role, TestAggregator>;
/** What of the owner must never reach another aggregator. */
let secrets: string[] = [];

const OWNER_NAMES = ['Meenakshi Sundaram Pillai', 'Nandini Rao Kulkarni'];
const FILE_NAME = 'owner-secret-file.csv';

function send(c: RouteCase, path: string, token: string) {
  const base = request(platform.url('aggregator'));
  let req = ({ GET: base.get, POST: base.post, PUT: base.put, PATCH: base.patch, DELETE: base.delete }[c.method]).call(base, path)
    .set('authorization', `Bearer ${token}`).set('idempotency-key', crypto.randomUUID());
  for (const [k, v] of Object.entries(c.headers ?? {})) req = req.set(k, v);
  return c.method === 'GET' || c.method === 'DELETE' ? req : req.send(c.body ?? {});
}

const RANDOM_ID = '6f1c7a4e-9a51-4c4e-8d0b-3f2a1b0c9d8e';
const withRandomIds = (path: string) => path.replace(/:[A-Za-z_]+/g, RANDOM_ID);

beforeAll(async () => {
  platform = await startTestPlatform({ worker: true, env: { BULK_PREVIEW_WAIT_MS: '20000' } });
  owner = await platform.aggregator({ types: ['seeker'] });
  intruder = await platform.aggregator({ types: ['seeker'] });
  for (const role of ALL) byRole[role] = await platform.aggregator({ types: ['seeker'], roles: [role] });
  const auth = `Bearer ${owner.token}`;
  const api = () => request(platform.url('aggregator'));

  const done = await onboard(platform, owner.token, {
    filename: FILE_NAME,
    file: csv(['name', 'phone', 'email', 'state'], [[OWNER_NAMES[0], '9845012301', 'meenakshi.pillai@example.org', 'Kerala'], [OWNER_NAMES[1], '9845012302', 'nandini@@bad', 'Karnataka']]),
  });
  own.upload = done.upload_id;
  const pending = await createUpload(platform, owner.token, { participantType: 'seeker', filename: FILE_NAME, file: csv(['name', 'phone', 'state'], [[OWNER_NAMES[1], '9845012303', 'Goa']]) });
  own.pending = pending.body.upload_id;
  const preview = await api().post(`/v1/bulk-uploads/${own.pending}/preview`).set('authorization', auth).send({ rows: 5 });
  expect(preview.status).toBe(200);
  own.preview = preview.body.preview_id;
  const mapping = await api().post('/v1/bulk-uploads/mappings').set('authorization', auth).send({ name: 'Owner secret mapping', participant_type: 'seeker', mapping: { name: 'name' } });
  expect(mapping.status).toBe(201);
  own.mapping = mapping.body.id;
  const link = await api().post('/v1/links/create').set('authorization', auth).send({ domain: 'seeker', status: 'live' });
  expect(link.status).toBe(201);
  own.link = link.body.link_id;
  const ids = await seedSeekers(platform, owner, ['+919845012304'], ['Owner Seeker Pillai']);
  const tomorrow = new Date(Date.now() + 86_400_000).toISOString();
  const voice = await createVoiceJob(platform, owner.token, { item_ids: ids, content: { script: 'Hello' }, schedule_at: tomorrow });
  expect(voice.status).toBe(202);
  own.voice = voice.body.job_id;
  const exported = await createVoiceJob(platform, owner.token, { channel: 'export', item_ids: ids });
  expect(exported.status).toBe(202);
  own.export = exported.body.job_id;
  secrets = [owner.aggregatorId, owner.orgId, owner.orgSlug, FILE_NAME, ...OWNER_NAMES, 'Owner secret mapping',
    link.body.slug, 'Owner Seeker Pillai', '9845012301', '9845012304', 'meenakshi.pillai', ...ids];
}, 120_000);
afterAll(() => platform?.stop());

describe('tenant isolation over every aggregator route', () => {
  it('the table covers every mounted Bearer route', () => {
    const mounted = mountedRoutes(appOf(platform.services.find((s) => s.name === 'aggregator')!.server))
      .filter((r) => !NOT_BEARER.some((p) => p.test(r.path)))
      .map((r) => `${r.method} ${r.path}`);
    expect(mounted.sort()).toEqual(ROUTES.map((r) => `${r.method} ${r.path}`).sort());
  });

  it.each(ROUTES.filter((r) => r.target))('$method $path: another aggregator gets $other and nothing of the owner', async (c) => {
    const res = await send(c, c.target!(), intruder.token);
    expect(res.status, JSON.stringify(res.body)).toBe(c.other);
    expect(res.body).toEqual({ error: expect.objectContaining({ code: expect.any(String), detail: expect.any(String), requestId: expect.any(String) }) });
    const seen = JSON.stringify(res.body) + JSON.stringify(res.headers);
    for (const secret of secrets) expect(seen.includes(secret), `answer holds ${secret}`).toBe(false);
  });

  it('an aggregator of the owner’s organisation reads its voice job (organisation scope) but not its export’s CSV (403)', async () => {
    const { rows: [sibling] } = await platform.ctx.pool.query<{ aggregator_id: string }>(
      `INSERT INTO aggregator.aggregators (org_id, name, types) VALUES ($1, 'Sibling of the owner', '{seeker}') RETURNING aggregator_id`, [owner.orgId]);
    const token = await platform.ctx.tokens.issue({
      sub: `aggregator:${sibling.aggregator_id}`, aggregator_id: sibling.aggregator_id, org_id: owner.orgId, aggregator_type: ['seeker'], roles: ['admin'],
    }, 600);
    const get = (path: string) => request(platform.url('aggregator')).get(path).set('authorization', `Bearer ${token}`);
    expect((await get(`/v1/campaign/voice/${own.voice}`)).status).toBe(200);
    const csv = await get(`/v1/campaign/exports/${own.export}`);
    expect(csv.status).toBe(403);
    expect(csv.body.error).toMatchObject({ code: 'forbidden', detail: expect.stringContaining('another aggregator') });
  });

  it('lists of another aggregator show nothing of the owner', async () => {
    for (const c of ROUTES.filter((r) => r.method === 'GET' && !r.target)) {
      const res = await send(c, c.path, intruder.token);
      expect(res.status, c.path).toBe(200);
      const seen = (typeof res.body === 'object' ? JSON.stringify(res.body) : '') + (res.text ?? '') + JSON.stringify(res.headers);
      for (const secret of secrets) expect(seen.includes(secret), `${c.path} holds ${secret}`).toBe(false);
    }
  });

  it('the owner’s records are unchanged by the other aggregator’s attempts, and still the owner’s', async () => {
    for (const c of ROUTES.filter((r) => r.target && r.method === 'GET')) {
      const res = await send(c, c.target!(), owner.token);
      expect(res.status, c.path).toBe(200);
    }
    const auth = `Bearer ${owner.token}`;
    const api = () => request(platform.url('aggregator'));
    expect((await api().get(`/v1/bulk-uploads/${own.pending}`).set('authorization', auth)).body.status).toBe('pending');
    expect((await api().get(`/v1/links/${own.link}`).set('authorization', auth)).body).toMatchObject({ link_id: own.link, status: 'live' });
    expect((await api().get(`/v1/bulk-uploads/mappings/${own.mapping}`).set('authorization', auth)).body).toMatchObject({ name: 'Owner secret mapping', retired_at: null });
  });

  it.each(ROUTES)('$method $path: roles allowed $roles', async (c) => {
    for (const role of ALL) {
      const res = await send(c, withRandomIds(c.path), byRole[role].token);
      if (c.roles.includes(role)) {
        expect(res.body?.error?.code, `${role} refused`).not.toBe('insufficient_role');
        expect(res.status, `${role}: ${JSON.stringify(res.body)}`).toBeLessThan(500);
      } else {
        expect(res.status, role).toBe(403);
        expect(res.body.error).toMatchObject({ code: 'insufficient_role', detail: expect.stringContaining('admin, operator') });
      }
    }
  });
});

describe('API-key routes', () => {
  it.each(['signals', 'search'] as const)('%s: every route that needs a key refuses a revoked key and the other service’s key (401)', async (service) => {
    const other: KeyService = service === 'signals' ? 'search' : 'signals';
    const revoked = await createApiKey(platform.ctx.pool, service, 'to revoke');
    expect(await revokeApiKey(platform.ctx.pool, service, revoked.keyId)).toBe(true);
    const foreign = (await createApiKey(platform.ctx.pool, other, 'other service')).key;
    const routes = mountedRoutes(appOf(platform.services.find((s) => s.name === (service as ServiceName))!.server));
    let keyed = 0;
    for (const r of routes) {
      const path = withRandomIds(r.path);
      const call = (key?: string) => {
        const base = request(platform.url(service));
        const req = (base[r.method.toLowerCase() as 'get'] as typeof base.get).call(base, path);
        return key ? req.set('x-api-key', key) : req;
      };
      const none = await call();
      if (none.status !== 401) continue; // a public route (health, login pages, …)
      keyed++;
      for (const key of [revoked.key, foreign]) {
        const res = await call(key);
        expect(res.status, `${r.method} ${r.path}`).toBe(401);
        expect(res.body).toMatchObject({ error: expect.any(String), message: expect.any(String) });
      }
    }
    expect(keyed).toBeGreaterThan(3);
  });
});
