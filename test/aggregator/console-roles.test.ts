/**
 * Roles hold in the console as in the API (issue 29, finding 4; docs/decisions.md "One use per
 * token; roles in the console"):
 * - every console route (read from the router, so a new route without a row fails) is asked as
 *   admin, operator and viewer, and without a session; a signed-in role gets the page, redirect or
 *   download exactly when the API lets that role call the equivalent API route (asked of the API
 *   itself: 403 `insufficient_role` or not), else the 403 page; without a session a page redirects
 *   to the sign-in and a form or event stream answers 401;
 * - the job page shows the failed rows' reasons (which quote cells) and links the error report to
 *   admin and operator only.
 */
import { randomUUID } from 'node:crypto';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { csv, createUpload, onboard } from '../helpers/bulk-upload.ts';
import { ConsoleClient, collectText, consoleLinkFor } from '../helpers/console.ts';
import { startTestPlatform, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';
import { appOf, mountedRoutes } from '../helpers/routes.ts';
import { createVoiceJob, phones, seedSeekers } from '../helpers/voice.ts';

type Role = 'admin' | 'operator' | 'viewer';
const ROLES: Role[] = ['admin', 'operator', 'viewer'];

let platform: TestPlatform;
let agg: TestAggregator;
let base: string;
const apiToken = {} as Record<Role, string>;
/** The aggregator's resources, filled in beforeAll. */
const own = { upload: '', voice: '', link: '', mapping: '' };
const BAD_PHONE = 'phone-9845-BAD';

const api = () => request(platform.url('aggregator'));
const pendingUpload = async () => (await createUpload(platform, agg.token, {
  participantType: 'seeker', file: csv(['name', 'phone', 'state'], [['Kavya Menon', '9845012310', 'Kerala']]),
})).body.upload_id as string;
const draftLink = async () => (await api().post('/v1/links/create').set('authorization', `Bearer ${agg.token}`).send({ domain: 'seeker', status: 'draft' })).body.link_id as string;
const savedMapping = async () => (await api().post('/v1/bulk-uploads/mappings').set('authorization', `Bearer ${agg.token}`)
  .send({ name: `Sheet ${randomUUID()}`, participant_type: 'seeker', mapping: { name: 'name', phone: 'phone' } })).body.id as string;

interface ConsoleRoute {
  method: 'GET' | 'POST';
  /** The router's path template. */
  path: string;
  /** A concrete path of one of the aggregator's resources (made fresh per call when the call changes it). */
  target?: () => string | Promise<string>;
  /** GET: a page (text/html), a download, or an event stream; POST: a form, or the multipart upload form. */
  kind: 'page' | 'download' | 'events' | 'form' | 'multipart';
  form?: () => Record<string, string>;
  /** What an allowed caller gets. */
  ok: 200 | 303 | 401;
  /** The API route with the same role rule, asked with each role's token (ids random: the role check comes first); none for routes without a session. */
  api?: { method: 'GET' | 'POST' | 'PUT' | 'DELETE'; path: string };
}

const ID = ':id';
const ROUTES: ConsoleRoute[] = [
  // Without a session, as without one.
  { method: 'GET', path: '/console/static/htmx.min.js', kind: 'download', ok: 200 },
  { method: 'POST', path: '/console/lang', kind: 'form', form: () => ({ lang: 'en', back: '/console/links' }), ok: 303 },
  { method: 'GET', path: '/console/login', kind: 'page', ok: 200 },
  { method: 'POST', path: '/console/login', kind: 'form', form: () => ({ token: 'not-a-console-link' }), ok: 401 },
  { method: 'POST', path: '/console/logout', kind: 'form', ok: 303 },
  // Signed in.
  { method: 'GET', path: '/console/', kind: 'page', ok: 303, api: { method: 'GET', path: '/v1/me' } },
  { method: 'GET', path: '/console/uploads', kind: 'page', ok: 200, api: { method: 'GET', path: '/v1/bulk-uploads' } },
  { method: 'POST', path: '/console/uploads', kind: 'multipart', ok: 303, api: { method: 'POST', path: '/v1/bulk-uploads' } },
  { method: 'GET', path: '/console/uploads/:id', target: () => `/console/uploads/${own.upload}`, kind: 'page', ok: 200, api: { method: 'GET', path: `/v1/bulk-uploads/${ID}` } },
  { method: 'POST', path: '/console/uploads/:id/start', target: async () => `/console/uploads/${await pendingUpload()}/start`, kind: 'form', form: () => ({ attestation: 'true' }), ok: 303, api: { method: 'POST', path: `/v1/bulk-uploads/${ID}/start` } },
  { method: 'POST', path: '/console/uploads/:id/preview', target: async () => `/console/uploads/${await pendingUpload()}/preview`, kind: 'form', ok: 303, api: { method: 'POST', path: `/v1/bulk-uploads/${ID}/preview` } },
  { method: 'GET', path: '/console/uploads/:id/events', target: () => `/console/uploads/${own.upload}/events`, kind: 'events', ok: 200, api: { method: 'GET', path: `/v1/bulk-uploads/${ID}/events` } },
  { method: 'GET', path: '/console/uploads/:id/errors.csv', target: () => `/console/uploads/${own.upload}/errors.csv`, kind: 'download', ok: 200, api: { method: 'GET', path: `/v1/bulk-uploads/${ID}/errors` } },
  { method: 'GET', path: '/console/links', kind: 'page', ok: 200, api: { method: 'GET', path: '/v1/links' } },
  { method: 'POST', path: '/console/links', kind: 'form', form: () => ({ domain: 'seeker' }), ok: 303, api: { method: 'POST', path: '/v1/links/create' } },
  { method: 'GET', path: '/console/links/:id', target: () => `/console/links/${own.link}`, kind: 'page', ok: 200, api: { method: 'GET', path: `/v1/links/${ID}` } },
  { method: 'POST', path: '/console/links/:id/activate', target: async () => `/console/links/${await draftLink()}/activate`, kind: 'form', ok: 303, api: { method: 'POST', path: `/v1/links/${ID}/activate` } },
  { method: 'POST', path: '/console/links/:id/retire', target: async () => `/console/links/${await draftLink()}/retire`, kind: 'form', ok: 303, api: { method: 'POST', path: `/v1/links/${ID}/retire` } },
  { method: 'GET', path: '/console/dashboard', kind: 'page', ok: 200, api: { method: 'GET', path: '/v1/dashboard' } },
  { method: 'POST', path: '/console/dashboard/export', kind: 'form', form: () => ({ item_ids: randomUUID(), domain: 'seeker' }), ok: 200, api: { method: 'POST', path: '/v1/dashboard/export/profiles' } },
  { method: 'GET', path: '/console/voice', kind: 'page', ok: 200, api: { method: 'GET', path: '/v1/campaign/voice' } },
  { method: 'GET', path: '/console/voice/:id', target: () => `/console/voice/${own.voice}`, kind: 'page', ok: 200, api: { method: 'GET', path: `/v1/campaign/voice/${ID}` } },
  { method: 'GET', path: '/console/voice/:id/events', target: () => `/console/voice/${own.voice}/events`, kind: 'events', ok: 200, api: { method: 'GET', path: `/v1/campaign/voice/${ID}` } },
  { method: 'GET', path: '/console/mappings', kind: 'page', ok: 200, api: { method: 'GET', path: '/v1/bulk-uploads/mappings' } },
  { method: 'GET', path: '/console/mappings/:id', target: () => `/console/mappings/${own.mapping}`, kind: 'page', ok: 200, api: { method: 'GET', path: `/v1/bulk-uploads/mappings/${ID}` } },
  { method: 'POST', path: '/console/mappings', kind: 'form', form: () => ({ participant_type: 'seeker', name: 'From the console', mapping: JSON.stringify({ name: 'name' }) }), ok: 303, api: { method: 'POST', path: '/v1/bulk-uploads/mappings' } },
  { method: 'POST', path: '/console/mappings/:id', target: () => `/console/mappings/${own.mapping}`, kind: 'form', form: () => ({ name: 'Edited', mapping: JSON.stringify({ name: 'name', phone: 'phone' }) }), ok: 303, api: { method: 'PUT', path: `/v1/bulk-uploads/mappings/${ID}` } },
  { method: 'POST', path: '/console/mappings/:id/retire', target: async () => `/console/mappings/${await savedMapping()}/retire`, kind: 'form', ok: 303, api: { method: 'DELETE', path: `/v1/bulk-uploads/mappings/${ID}` } },
];

/** Whether the API lets `role` call `route` (anything but 401 and 403 insufficient_role). */
async function apiAllows(role: Role, route: NonNullable<ConsoleRoute['api']>): Promise<boolean> {
  const path = route.path.replace(ID, randomUUID());
  const call = { GET: api().get(path), POST: api().post(path), PUT: api().put(path), DELETE: api().delete(path) }[route.method]
    .set('authorization', `Bearer ${apiToken[role]}`).set('idempotency-key', randomUUID());
  const res = await (route.method === 'POST' || route.method === 'PUT' ? call.send({}) : call);
  expect(res.status, `API ${route.method} ${route.path} as ${role}`).not.toBe(401);
  return !(res.status === 403 && res.body?.error?.code === 'insufficient_role');
}

/** Asks the console `route` with `client` (signed in or not), as a browser would. */
async function ask(client: ConsoleClient, route: ConsoleRoute) {
  const path = route.target ? await route.target() : route.path;
  if (route.kind === 'events') return client.events(path);
  if (route.method === 'GET') return client.get(path);
  const csrf = await client.csrf(client.cookies.has('ldp_console') ? '/console/uploads' : '/console/login');
  if (route.kind === 'multipart') {
    return request(base).post(`${path}?_csrf=${encodeURIComponent(csrf)}`).set('cookie', client.cookieHeader())
      .field('participant_type', 'seeker').attach('file', csv(['name', 'phone'], [['Ravi Pillai', '9845012311']]), 'camp.csv');
  }
  return client.post(path, { ...route.form?.(), _csrf: csrf });
}

async function signedIn(role: Role) {
  const client = new ConsoleClient(base);
  expect((await client.signIn(await consoleLinkFor(platform, agg, role))).status).toBe(303);
  return client;
}

beforeAll(async () => {
  platform = await startTestPlatform({ services: ['signals', 'aggregator'], worker: true });
  agg = await platform.aggregator({ types: ['seeker'] });
  base = platform.url('aggregator');
  for (const role of ROLES) {
    apiToken[role] = await platform.ctx.tokens.issue({ sub: `test:${role}`, aggregator_id: agg.aggregatorId, org_id: agg.orgId, aggregator_type: ['seeker'], roles: [role] }, 3600);
  }
  const done = await onboard(platform, agg.token, {
    file: csv(['name', 'phone', 'state'], [['Meera Nair', '9845012301', 'Kerala'], ['Anil Kumar', BAD_PHONE, 'Kerala']]),
  });
  expect(done.failed).toBe(1);
  own.upload = done.upload_id;
  own.link = await draftLink();
  own.mapping = await savedMapping();
  const voice = await createVoiceJob(platform, agg.token, { channel: 'export', item_ids: await seedSeekers(platform, agg, phones(2)) });
  expect(voice.status).toBe(202);
  own.voice = voice.body.job_id;
}, 120_000);
afterAll(() => platform?.stop());

describe('roles in the console', () => {
  it('the table has a row for every console route the router mounts', () => {
    const mounted = mountedRoutes(appOf(platform.services.find((s) => s.name === 'aggregator')!.server))
      .filter((r) => r.path === '/console' || r.path.startsWith('/console/'))
      .map((r) => `${r.method} ${r.path}`);
    expect(mounted.sort()).toEqual(ROUTES.map((r) => `${r.method} ${r.path}`).sort());
  });

  it.each(ROUTES)('$method $path: each role as the API allows it, no session signs in first', async (route) => {
    for (const role of ROLES) {
      // A fresh session each time: signing out (a row) ends it.
      const res = await ask(await signedIn(role), route);
      const allowed = route.api ? await apiAllows(role, route.api) : true;
      if (allowed) {
        expect(res.status, `${role}: ${res.text?.slice(0, 300)}`).toBe(route.ok);
      } else {
        expect(res.status, role).toBe(403);
        expect(res.text, role).toContain('needs one of the roles admin, operator');
      }
    }
    const anonymous = await ask(new ConsoleClient(base), route);
    if (!route.api) {
      expect(anonymous.status, 'no session').toBe(route.ok);
    } else if (route.method === 'GET' && route.kind !== 'events') {
      expect(anonymous.status, 'no session').toBe(303);
      expect(anonymous.headers.location).toBe('/console/login');
    } else {
      expect(anonymous.status, 'no session').toBe(401);
    }
  });

  it('shows the failed rows\' reasons and the error report to admin and operator only', async () => {
    const job = `/console/uploads/${own.upload}`;
    const rowsPartial = (client: ConsoleClient) => request(base).get(job).set('cookie', client.cookieHeader())
      .set('hx-request', 'true').set('hx-target', 'problem-rows').buffer(true).parse(collectText);
    for (const role of ROLES) {
      const client = await signedIn(role);
      const page = await client.get(job);
      const partial = await rowsPartial(client);
      expect(page.status).toBe(200);
      expect(page.text, role).toMatch(/<td class="num">3<\/td><td>Failed<\/td>/);
      for (const html of [page.text, partial.body as string]) {
        if (role === 'viewer') {
          expect(html, role).not.toContain(BAD_PHONE);
          expect(html, role).not.toContain('class="reasons"');
          expect(html, role).toContain('shown to admins and operators only');
        } else {
          expect(html, role).toContain(BAD_PHONE);
        }
      }
      expect(page.text.includes(`${job}/errors.csv`), role).toBe(role !== 'viewer');
    }
  });
});
