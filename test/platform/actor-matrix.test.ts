/**
 * The actor table (docs/decisions.md, "Actors and routes"), as a test:
 * - the table is read from docs/decisions.md itself, so the document and the test cannot drift;
 * - every route the three services mount (read from their routers), and the worker port's, has
 *   exactly one row, and every row names mounted routes only: a new route without a row fails;
 * - every route is called as every actor of the table's columns against one real platform (all
 *   services and a worker, METRICS_TOKEN set) and the answer must be the cell's: `allowed` (neither
 *   401 nor 403, nor a 5xx: a 400 or 404 for a dummy body or id says the credential got through),
 *   `as key` / `as public` (the credential is not read: the same answer as the API key alone / as
 *   no credential), or a status with its error code; each credential is let in somewhere the
 *   public is not, so no refusal is a dead credential's;
 * - on the API-key routes every credential without the key gets the public 401;
 * - the operator console (`/console/*`, its roles in the console table) answers every credential
 *   but its own session as it answers the public, and signs in with a console link only, once;
 * - found by the table: an aggregator's viewer token performed and moved actions and read revealed
 *   contacts on signals; it now only reads, without contacts.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openApiPath } from '../../api/http/openapi.ts';
import { startWorkerPort, type WorkerPort } from '../../api/http/worker-app.ts';
import { SESSION_COOKIE as CONSOLE_COOKIE } from '../../api/console/routes.ts';
import { createReview, reviewLinkKey, signReviewToken } from '../../lib/aggregator/review-links.ts';
import { itemPerson } from '../../lib/clients/signals-client.ts';
import { createSession, SESSION_COOKIE } from '../../lib/signals/sessions.ts';
import { ConsoleClient, consoleLinkFor } from '../helpers/console.ts';
import { startTestPlatform, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';
import { appOf, mountedRoutes } from '../helpers/routes.ts';

/** The table's columns, in order: who calls (docs/decisions.md explains each). */
const ACTORS = ['public', 'API key', 'internal key', 'person token', 'person session', 'admin', 'operator', 'viewer',
  'console link', 'console session', 'review link', 'METRICS_TOKEN'] as const;
type Actor = typeof ACTORS[number];
const SERVICES = ['signals', 'search', 'aggregator', 'worker'] as const;
type Service = typeof SERVICES[number];

/** A cell: what the actor gets. */
type Outcome = { kind: 'allowed' | 'as key' | 'as public' } | { kind: 'status'; status: number; code?: string } | { kind: 'text' };
interface Row {
  services: Service[];
  /** `METHOD /openapi/{path}`, or a prefix ending in `*` (the console). */
  route: string;
  cells: Record<Actor, Outcome>;
  text: Record<Actor, string>;
}

const SECTION = '## Actors and routes';

/**
 * One cell: `allowed …`, `as key …`, `as public …`, or `NNN` with an optional `code` in backticks,
 * then any words; anything else is prose (the console row's public and session cells only).
 */
function parseCell(text: string): Outcome {
  const kind = /^(allowed|as key|as public)\b/.exec(text);
  if (kind) return { kind: kind[1] as 'allowed' | 'as key' | 'as public' };
  const m = /^(\d{3})(?:\s+`([^`]+)`)?/.exec(text);
  return m ? { kind: 'status', status: Number(m[1]), code: m[2] } : { kind: 'text' };
}

/** The rows of the first table of the section "Actors and routes" of docs/decisions.md. */
function readTable(): Row[] {
  const doc = readFileSync(new URL('../../docs/decisions.md', import.meta.url), 'utf8');
  const start = doc.indexOf(`\n${SECTION}\n`);
  if (start < 0) throw new Error(`docs/decisions.md has no section "${SECTION}"`);
  const section = doc.slice(start + SECTION.length + 2).split(/\n## /)[0];
  const lines = section.split('\n');
  const first = lines.findIndex((l) => l.startsWith('| Service |'));
  if (first < 0) throw new Error('the section has no table starting "| Service |"');
  const split = (line: string) => line.slice(1, line.endsWith('|') ? -1 : undefined).split('|').map((c) => c.trim());
  const header = split(lines[first]);
  if (header.join('|') !== ['Service', 'Route', ...ACTORS].join('|')) throw new Error(`the table's columns must be Service, Route, ${ACTORS.join(', ')}`);
  const rows: Row[] = [];
  for (const line of lines.slice(first + 2)) {
    if (!line.startsWith('|')) break;
    const [services, route, ...cells] = split(line);
    if (cells.length !== ACTORS.length) throw new Error(`${cells.length} cells, not ${ACTORS.length}, in: ${line}`);
    const named = /^`([A-Z]+ \/[^`]*|\/[^`]*\*)`/.exec(route);
    if (!named) throw new Error(`unreadable route: ${route}`);
    rows.push({
      services: services.split(/,\s*/).map((s) => {
        if (!(SERVICES as readonly string[]).includes(s)) throw new Error(`unknown service ${s} in: ${line}`);
        return s as Service;
      }),
      route: named[1],
      cells: Object.fromEntries(ACTORS.map((a, i) => [a, parseCell(cells[i])])) as Record<Actor, Outcome>,
      text: Object.fromEntries(ACTORS.map((a, i) => [a, cells[i]])) as Record<Actor, string>,
    });
  }
  return rows;
}

let platform: TestPlatform;
let workerPort: WorkerPort;
const METRICS_TOKEN = 'metrics-token-of-the-actor-matrix';
const key = { signals: '', search: '' };
/** Each actor's credential (a token, a cookie's value or a key). */
const cred = {} as Record<Exclude<Actor, 'public'>, string>;
/** A second session of the person, for the logout route (which ends it). */
let logoutSession = '';
/** Review links, one per review route (a decision uses its link up). */
const reviewLinks: Record<string, string> = {};
/** A live registration link of the aggregator, for the public form and registration routes. */
const live = { orgSlug: '', slug: '' };
/** The invite the action routes are called with: its source is the person's, onboarded by the aggregator. */
const action = { id: '', body: {} as object };
/** An invite of the person's accepted by its target's person: its contacts are revealed to the parties. */
let revealedId = '';
/** `service METHOD /path` of the routes each service documents as taking an API key. */
const keyed = new Set<string>();
/** The mounted routes per service, as `METHOD /openapi/{path}`. */
const mounted = {} as Record<Service, string[]>;

const base = (service: Service) => (service === 'worker' ? workerPort.url : platform.url(service));
/** The actors whose credential is a token (a review page takes it in its path). */
const TOKEN_ACTORS: Actor[] = ['person token', 'admin', 'operator', 'viewer', 'console link', 'review link', 'METRICS_TOKEN'];

beforeAll(async () => {
  platform = await startTestPlatform({ worker: true, env: { METRICS_TOKEN, ORG_HIERARCHY_ENABLED: 'true' } });
  // The port `ldp worker` serves (bin/platform.ts opens it only in a process that is a worker alone).
  workerPort = await startWorkerPort(platform.ctx, '127.0.0.1', 0);
  key.signals = await platform.apiKey('signals');
  key.search = await platform.apiKey('search');
  const agg = await platform.aggregator({ types: ['seeker', 'provider'] });
  const other = await platform.aggregator({ types: ['seeker'] });
  const roleToken = (role: string) => platform.ctx.tokens.issue({
    sub: `aggregator:${agg.aggregatorId}`, aggregator_id: agg.aggregatorId, org_id: agg.orgId, aggregator_type: ['seeker', 'provider'], roles: [role],
  }, 600);

  // The person: a provider item's, onboarded by `agg`; the invite's seeker is another aggregator's.
  const signals = () => request(platform.url('signals'));
  const put = async (item: { item_id: string }, by: TestAggregator, person: Record<string, string>) => {
    const res = await signals().put(`/api/v1/items/${item.item_id}`).set('x-api-key', key.signals)
      .send({ ...item, created_by: `aggregator:${by.aggregatorId}`, person: itemPerson(platform.ctx.pii, person) });
    expect(res.status, res.text).toBe(201);
    return res.body.user_id as string;
  };
  const item = (domain: 'provider' | 'seeker') => (domain === 'provider'
    ? { item_network: 'local-discovery', item_domain: 'provider', item_type: 'facility', item_id: randomUUID(),
      item_state: { name: 'Sunrise Tailoring', category: 'Education', district: 'Kaithal', state: 'Haryana', latitude: 29.8, longitude: 76.4 } }
    : { item_network: 'local-discovery', item_domain: 'seeker', item_type: 'seeker_profile', item_id: randomUUID(),
      item_state: { skills: ['tailoring'], district: 'Kaithal', state: 'Haryana' } });
  const source = item('provider');
  const person = await put(source, agg, { name: 'Sunrise desk', email: 'desk@sunrise.example' });
  let phone = 500030;
  const invite = async () => {
    const target = item('seeker');
    const targetUser = await put(target, other, { name: 'Meena Kumari', phone: `+919876${phone++}` });
    const ref = ({ item_state: _s, ...r }: ReturnType<typeof item>) => r;
    return {
      targetUser,
      body: {
        action_type: 'invite', source_item: ref(source), target_item: { ...ref(target), item_instance_url: 'http://aggregator.example/participants' },
        consent: { acknowledged: true, version: 1 }, requirements_snapshot: { role: 'Tailor' },
      },
    };
  };
  const personToken = await platform.ctx.tokens.issueUser(person, 600);
  const perform = async (body: object) => {
    const res = await signals().post('/api/v1/action/perform').set('x-api-key', key.signals).set('authorization', `Bearer ${personToken}`).send(body);
    expect(res.status, res.text).toBe(201);
    return res.body.results[0].action_id as string;
  };
  action.id = await perform((await invite()).body);
  action.body = (await invite()).body;
  const toReveal = await invite();
  revealedId = await perform(toReveal.body);
  const accepted = await signals().post(`/api/v1/action/${revealedId}/status`).set('x-api-key', key.signals)
    .set('authorization', `Bearer ${await platform.ctx.tokens.issueUser(toReveal.targetUser, 600)}`).send({ action_status: 'accepted', update_count: 0 });
  expect(accepted.status, accepted.text).toBe(200);

  const link = await request(platform.url('aggregator')).post('/v1/links/create').set('authorization', `Bearer ${agg.token}`).send({ domain: 'seeker', status: 'live' });
  expect(link.status, link.text).toBe(201);
  Object.assign(live, { orgSlug: agg.orgSlug, slug: link.body.slug });

  const review = async () => signReviewToken(await reviewLinkKey(platform.config),
    { reviewId: await createReview(platform.ctx.pool, 'organisation', agg.orgId), kind: 'organisation', subjectId: agg.orgId, intent: 'approve' },
    new Date(Date.now() + 600_000));
  for (const route of ['GET /review/{token}', 'POST /review/{token}', 'POST /review/{token}/renew']) reviewLinks[route] = await review();

  const consoleClient = new ConsoleClient(platform.url('aggregator'));
  expect((await consoleClient.signIn(await consoleLinkFor(platform, agg, 'admin'))).status).toBe(303);
  Object.assign(cred, {
    'API key': key.signals,
    'internal key': platform.ctx.internalApiKey,
    'person token': personToken,
    'person session': (await createSession(platform.ctx.pool, person, 'test', 600)).token,
    admin: await roleToken('admin'),
    operator: await roleToken('operator'),
    viewer: await roleToken('viewer'),
    'console link': new URL(await consoleLinkFor(platform, agg, 'admin')).searchParams.get('token')!,
    'console session': consoleClient.cookies.get(CONSOLE_COOKIE)!,
    'review link': await review(),
    METRICS_TOKEN,
  });
  logoutSession = (await createSession(platform.ctx.pool, person, 'test', 600)).token;

  for (const service of ['signals', 'search', 'aggregator'] as const) {
    mounted[service] = mountedRoutes(appOf(platform.services.find((s) => s.name === service)!.server)).map((r) => `${r.method} ${openApiPath(r.path)}`);
    const doc = (await request(platform.url(service)).get('/openapi.json')).body as { paths: Record<string, Record<string, { security?: object[] }>> };
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(item)) {
        if (op.security?.some((s) => 'apiKey' in s)) keyed.add(`${service} ${method.toUpperCase()} ${path}`);
      }
    }
  }
  // The worker port's routes (api/http/worker-app.ts, an app of two routes it does not expose).
  mounted.worker = ['GET /health', 'GET /metrics'];
}, 120_000);
afterAll(async () => {
  await workerPort?.close();
  await platform?.stop();
});

const rows = readTable();
const isConsole = (row: Row) => row.route.startsWith('/console');

/**
 * `actor`'s request to `route` of `service`: its credential where its holder sends it (with the
 * service's API key on a keyed route, unless `withKey` is false), a dummy body, unknown ids (the
 * live link's slugs, the action's id: the route's own rules are then reached).
 */
function call(service: Service, route: string, actor: Actor, withKey = true) {
  const [method, template] = route.split(' ');
  const headers: Record<string, string> = { 'idempotency-key': randomUUID() };
  let body: object | undefined = ['POST', 'PUT', 'PATCH'].includes(method) ? {} : undefined;
  const params: Record<string, string> = { orgSlug: live.orgSlug, slug: live.slug };
  let path = template.replace(/\{(\w+)\}/g, (_m, name: string) => params[name] ?? randomUUID());
  if (route.startsWith('POST /api/v1/action/perform')) body = action.body;
  if (route.includes('/api/v1/action/{id}')) path = template.replace('{id}', action.id);
  // A stale update_count: a party gets 409 and nothing moves.
  if (route === 'POST /api/v1/action/{id}/status') body = { action_status: 'rejected', update_count: 999 };
  // A review page's credential is its path: each token actor puts its own token there.
  const inPath = template.startsWith('/review/{token}') && TOKEN_ACTORS.includes(actor);
  if (template.startsWith('/review/{token}')) {
    path = template.replace('{token}', actor === 'review link' ? reviewLinks[route] : inPath ? cred[actor as Exclude<Actor, 'public'>] : 'not-a-review-link');
  }
  if (!inPath) {
    const serviceKey = service === 'search' ? key.search : key.signals;
    const value = route === 'POST /api/v1/auth/session/logout' && actor === 'person session' ? logoutSession : cred[actor as Exclude<Actor, 'public'>];
    switch (actor) {
      case 'public': break;
      case 'API key': headers['x-api-key'] = serviceKey; break;
      case 'internal key': headers['x-api-key'] = value; break;
      case 'person session': headers.cookie = `${SESSION_COOKIE}=${value}`; break;
      case 'console session': headers.cookie = `${CONSOLE_COOKIE}=${value}`; break;
      default: headers.authorization = `Bearer ${value}`;
    }
    if (withKey && keyed.has(`${service} ${route}`) && !['public', 'API key', 'internal key'].includes(actor)) headers['x-api-key'] = serviceKey;
  }
  return fetch(`${base(service)}${path}`, {
    method, redirect: 'manual',
    headers: { ...headers, ...(body ? { 'content-type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
}

interface Answer { status: number; code?: string; location?: string | null }

/** The status and error code of an answer (shape A `error`, B `code`, C `error.code`; none for a page). */
async function answerOf(res: Response): Promise<Answer> {
  const text = await res.text();
  let code: string | undefined;
  if ((res.headers.get('content-type') ?? '').includes('json')) {
    const body = JSON.parse(text);
    code = typeof body?.error === 'string' ? (typeof body.code === 'string' ? body.code : body.error) : body?.error?.code;
  }
  return { status: res.status, code, location: res.headers.get('location') };
}

const show = (a: Answer) => `${a.status}${a.code ? ` ${a.code}` : ''}${a.location ? ` → ${a.location}` : ''}`;
const same = (a: Answer, b: Answer) => a.status === b.status && a.code === b.code && a.location === b.location;

/** Whether `answer` is what `cell` says, given the route's answers to the API key alone and to the public. */
function fits(cell: Outcome, answer: Answer, others: { key: Answer; public: Answer }): boolean {
  switch (cell.kind) {
    case 'allowed': return answer.status !== 401 && answer.status !== 403 && answer.status < 500;
    case 'as key': return same(answer, others.key);
    case 'as public': return same(answer, others.public);
    case 'status': return answer.status === cell.status && (cell.code === undefined || answer.code === cell.code);
    default: return false;
  }
}

/** Runs `tasks`, at most `limit` at a time. */
async function pooled<T>(tasks: (() => Promise<T>)[], limit = 12): Promise<T[]> {
  const results: T[] = [];
  let next = 0;
  await Promise.all(Array.from({ length: limit }, async () => {
    while (next < tasks.length) {
      const i = next++;
      results[i] = await tasks[i]();
    }
  }));
  return results;
}

describe('the actor table of docs/decisions.md', () => {
  const matches = (row: Row, route: string) => (row.route.endsWith('*') ? route.split(' ')[1].startsWith(row.route.slice(0, -1)) : row.route === route);

  it('has one row for every mounted route of every service, and no row for a route not mounted', () => {
    const count = (service: Service, route: string) => rows.filter((r) => r.services.includes(service) && matches(r, route)).length;
    const all = SERVICES.flatMap((service) => mounted[service].map((route) => ({ service, route })));
    expect(all.filter((r) => count(r.service, r.route) === 0).map((r) => `${r.service} ${r.route}`), 'routes without a row').toEqual([]);
    expect(all.filter((r) => count(r.service, r.route) > 1).map((r) => `${r.service} ${r.route}`), 'routes in two rows').toEqual([]);
    const stale = rows.flatMap((r) => r.services.filter((s) => !mounted[s].some((m) => matches(r, m))).map((s) => `${s} ${r.route}`));
    expect(stale, 'rows naming no mounted route').toEqual([]);
    // Prose only where the console table says it.
    const prose = rows.filter((r) => !isConsole(r)).flatMap((r) => ACTORS.filter((a) => r.cells[a].kind === 'text').map((a) => `${r.route} ${a}: ${r.text[a]}`));
    expect(prose, 'cells that say no outcome').toEqual([]);
  });

  it('holds: every route answers every actor as its cell says', async () => {
    const cases = rows.filter((r) => !isConsole(r)).flatMap((row) => row.services.map((service) => ({ row, service, answers: {} as Record<Actor, Answer> })));
    // Every call at once, but a perform's in turn: each finds the action the one before made open.
    const ask = (c: typeof cases[number], actors: readonly Actor[]) => async () => {
      for (const actor of actors) c.answers[actor] = await answerOf(await call(c.service, c.row.route, actor));
    };
    await pooled(cases.flatMap((c) => (c.row.route === 'POST /api/v1/action/perform' ? [ask(c, ACTORS)] : ACTORS.map((a) => ask(c, [a])))), 24);
    const mismatches: string[] = [];
    /** The actors let in somewhere the public is not (so their credential is live). */
    const opened = new Set<Actor>();
    for (const { row, service, answers } of cases) {
      for (const actor of ACTORS) {
        if (!fits(row.cells[actor], answers[actor], { key: answers['API key'], public: answers.public })) {
          mismatches.push(`${service} ${row.route} as ${actor}: the table says "${row.text[actor]}", the service answers ${show(answers[actor])}`);
        }
        if (answers.public.status >= 400 && answers[actor].status < 400) opened.add(actor);
      }
    }
    expect(mismatches).toEqual([]);
    // Else a refusal could be a dead credential's (the console's two: the console tests below).
    expect(ACTORS.filter((a) => !opened.has(a) && a !== 'public' && a !== 'console link' && a !== 'console session'), 'credentials let in nowhere').toEqual([]);
  });

  it('on the API-key routes, every credential without the key gets the public 401', async () => {
    const cases = rows.flatMap((row) => row.services.filter((s) => keyed.has(`${s} ${row.route}`)).map((service) => ({ row, service })));
    expect(cases.length).toBeGreaterThan(15);
    const wrong: string[] = [];
    await pooled(cases.flatMap(({ row, service }) => ACTORS.filter((a) => !['public', 'API key', 'internal key'].includes(a)).map((actor) => async () => {
      const answer = await answerOf(await call(service, row.route, actor, false));
      if (answer.status !== 401 || answer.code !== 'missing_api_key') wrong.push(`${service} ${row.route} as ${actor} without the key: ${show(answer)}`);
    })));
    expect(wrong).toEqual([]);
  });
});

describe('the operator console', () => {
  const consoleRow = () => rows.find(isConsole)!;

  it('answers every credential but its own session as the public, on every route', async () => {
    const row = consoleRow();
    expect(row.cells.public.kind).toBe('text');
    expect(row.text['console session']).toContain('#one-use-per-token-roles-in-the-console');
    const others = ACTORS.filter((a) => a !== 'public' && a !== 'console session');
    expect(others.filter((a) => row.cells[a].kind !== 'as public'), 'console cells not "as public"').toEqual([]);
    const routes = mounted.aggregator.filter((r) => r.split(' ')[1].startsWith('/console'));
    expect(routes.length).toBeGreaterThan(20);
    const wrong: string[] = [];
    await pooled(routes.map((route) => async () => {
      const pub = await answerOf(await call('aggregator', route, 'public'));
      for (const actor of others) {
        const answer = await answerOf(await call('aggregator', route, actor));
        if (!same(answer, pub)) wrong.push(`${route} as ${actor}: ${show(answer)}, the public gets ${show(pub)}`);
      }
    }));
    expect(wrong).toEqual([]);
    // The session itself is live (its roles: test/aggregator/console-roles.test.ts).
    expect((await fetch(`${platform.url('aggregator')}/console/uploads`, { headers: { cookie: `${CONSOLE_COOKIE}=${cred['console session']}` } })).status).toBe(200);
  });

  it('signs in with a console link only, once', async () => {
    const signIn = async (token: string) => {
      const client = new ConsoleClient(platform.url('aggregator'));
      const page = await client.get(`/console/login?token=${encodeURIComponent(token)}`);
      return client.post('/console/login', { _csrf: /name="_csrf" value="([^"]+)"/.exec(page.text)![1], token });
    };
    for (const actor of TOKEN_ACTORS.filter((a) => a !== 'console link')) {
      expect((await signIn(cred[actor as Exclude<Actor, 'public'>])).status, actor).toBe(401);
    }
    expect((await signIn(cred['console link'])).status).toBe(303);
    expect((await signIn(cred['console link'])).status).toBe(401);
  });
});

describe('an aggregator\'s viewer only reads actions (found by the table)', () => {
  it('sees no contacts of an action its aggregator is a party to; admin and operator do', async () => {
    const read = (actor: Actor) => request(platform.url('signals')).get(`/api/v1/action/${revealedId}`)
      .set('x-api-key', key.signals).set('authorization', `Bearer ${cred[actor as Exclude<Actor, 'public'>]}`);
    for (const actor of ['admin', 'operator'] as const) {
      const res = await read(actor);
      expect(res.status).toBe(200);
      expect(res.body).toMatchObject({ pii_revealed: true, contacts: { source: { email: 'desk@sunrise.example' } } });
    }
    const viewer = await read('viewer');
    expect(viewer.status).toBe(200);
    expect(viewer.body).toMatchObject({ action_status: 'accepted', pii_revealed: true, contacts: null });
    expect(viewer.text).not.toContain('desk@sunrise.example');
    expect(viewer.text).not.toContain('Meena Kumari');
  });

  it('performs and moves nothing: 403 insufficient_role, nothing written', async () => {
    const headers = { 'x-api-key': key.signals, authorization: `Bearer ${cred.viewer}` };
    const before = (await platform.ctx.pool.query('SELECT count(*)::int AS n FROM signals.actions')).rows[0].n;
    const performed = await request(platform.url('signals')).post('/api/v1/action/perform').set(headers).send(action.body);
    expect(performed.status).toBe(403);
    expect(performed.body).toMatchObject({ error: 'insufficient_role', results: [{ status: 'failed', error: 'insufficient_role' }] });
    const moved = await request(platform.url('signals')).post(`/api/v1/action/${revealedId}/status`).set(headers).send({ action_status: 'completed', update_count: 1 });
    expect(moved.status).toBe(403);
    expect(moved.body).toMatchObject({ error: 'insufficient_role' });
    expect((await platform.ctx.pool.query('SELECT count(*)::int AS n FROM signals.actions')).rows[0].n).toBe(before);
    expect((await platform.ctx.pool.query('SELECT action_status FROM signals.actions WHERE action_id = $1', [revealedId])).rows[0].action_status).toBe('accepted');
  });
});
