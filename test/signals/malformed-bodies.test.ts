/**
 * No malformed body makes a people or action endpoint fail with 500: each answers 4xx in its
 * shape (B for signup and the guardian route, A elsewhere), and writes nothing.
 */
import { randomUUID } from 'node:crypto';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';

let platform: TestPlatform;
let key: string;

beforeAll(async () => {
  platform = await startTestPlatform({ services: ['signals'], env: { HTTP_BODY_LIMIT: '64kb', SIGNUP_LIMIT_PER_IP: '1' } });
  key = await platform.apiKey('signals');
});
afterAll(() => platform.stop());

const BODIES: unknown[] = [
  null, 0, 'text', true, [], [{}], {}, { name: null }, { name: {} }, { email: ['a'] }, { age: 'x' }, { age: 1e308 },
  { consent: 'yes' }, { source_item: 'x' }, { source_item: { item_id: 5 } }, { target_item: [] }, { guardian_otp: 123456 },
  { requirements_snapshot: [] }, { action_status: 5, update_count: '0' }, { __proto__: { polluted: true } },
  { constructor: { prototype: { x: 1 } } }, { network: 'local-discovery', email: 'a@b.c', phoneNumber: {} },
  { name: 'A', email: 'a@example.in', domain: ['seeker'] }, { guardianDeclarationAccepted: 'true' },
  JSON.parse('{"a":'.repeat(200) + '1' + '}'.repeat(200)),
];
const RAW = ['{', '{"name": "A",}', 'null', '"\\ud800"', 'x'.repeat(70_000)];
const ROUTES: [string, 'A' | 'B'][] = [
  ['/api/v1/auth/signup', 'B'], ['/api/v1/consent/u18/signup/guardian', 'B'], ['/api/v1/auth/u18-precheck', 'A'],
  ['/api/v1/action/perform', 'A'], [`/api/v1/action/${randomUUID()}/status`, 'A'],
];

const shapeOk = (shape: 'A' | 'B', body: Record<string, unknown>) => (shape === 'A'
  ? typeof body.error === 'string' && typeof body.message === 'string'
  : typeof body.code === 'string' && typeof body.error === 'string' && typeof body.message === 'string');

describe('malformed bodies', () => {
  it.each(ROUTES)('%s answers 4xx in its shape for every malformed body, and writes nothing', async (path, shape) => {
    for (const body of BODIES) {
      const res = await request(platform.url('signals')).post(path).set('x-api-key', key).set('content-type', 'application/json').send(JSON.stringify(body));
      expect(res.status, `${path} ${JSON.stringify(body)}`).toBeGreaterThanOrEqual(400);
      expect(res.status, `${path} ${JSON.stringify(body)}`).toBeLessThan(500);
      expect(shapeOk(shape, res.body), JSON.stringify(res.body)).toBe(true);
    }
    for (const raw of RAW) {
      const res = await request(platform.url('signals')).post(path).set('x-api-key', key).set('content-type', 'application/json').send(raw);
      expect(res.status, `${path} ${raw.slice(0, 40)}`).toBeGreaterThanOrEqual(400);
      expect(res.status).toBeLessThan(500);
      expect(shapeOk(shape, res.body)).toBe(true);
    }
    const { rows } = await platform.ctx.pool.query(`SELECT (SELECT count(*) FROM signals.users) + (SELECT count(*) FROM signals.actions) AS n`);
    expect(rows[0].n).toBe(0);
  });

  it('answers malformed login queries with 400 (unknown keys: the sign-in form), never 500', async () => {
    for (const q of ['email=a', 'phoneNumber=%00', 'email[]=a', 'return_to=' + 'x'.repeat(600), 'state=&code=1', 'state=x&code=']) {
      const res = await request(platform.url('signals')).get(`/api/v1/auth/session/login?${q}`).set('accept', 'application/json');
      expect(res.status, q).toBe(q === 'email[]=a' || q.startsWith('state') ? 200 : 400);
      const cb = await request(platform.url('signals')).get(`/api/v1/auth/session/callback?${q}`);
      expect(cb.status, q).toBeGreaterThanOrEqual(400);
      expect(cb.status, q).toBeLessThan(500);
    }
  });

  // Last: valid requests that count against the per-IP limits (SIGNUP_LIMIT_PER_IP=1 here).
  it('limits signups per client IP and code logins per client IP (429 with Retry-After)', async () => {
    const signup = (email: string) => request(platform.url('signals')).post('/api/v1/auth/signup').set('x-api-key', key).send({ name: 'A', email });
    expect((await signup('first@example.in')).status).toBe(201);
    const limited = await signup('second@example.in');
    expect(limited.status).toBe(429);
    expect(limited.body).toEqual({ code: 'RATE_LIMITED', error: 'Too Many Requests', message: expect.any(String) });
    expect(Number(limited.headers['retry-after'])).toBeGreaterThan(0);

    const login = () => request(platform.url('signals')).get('/api/v1/auth/session/login').query({ email: 'first@example.in' }).set('accept', 'application/json');
    expect((await login()).status).toBe(202);
    expect((await login()).status).toBe(202);
    const tooMany = await login();
    expect(tooMany.status).toBe(429);
    expect(tooMany.body).toEqual({ error: 'RATE_LIMITED', message: expect.any(String) });
  });
});
