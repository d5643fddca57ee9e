/**
 * The auth group: config, built-in one-time-code login (page and JSON), session cookie, session,
 * me (cookie and bearer), logout — against a real worker writing codes to the outbox.
 */
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { enqueue } from '../../lib/platform/jobs.ts';
import { codeOf, readOutbox, waitForMessage } from '../helpers/messages.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';

let platform: TestPlatform;
let key: string;
const base = () => platform.url('signals');
const outbox = () => readOutbox(platform.dataDir);

beforeAll(async () => {
  platform = await startTestPlatform({ services: ['signals'], worker: true });
  key = await platform.apiKey('signals');
  const res = await request(base()).post('/api/v1/auth/signup').set('x-api-key', key).send({ name: 'Ravi Kumar', email: 'ravi@example.in', age: 31 });
  expect(res.status).toBe(201);
});
afterAll(() => platform.stop());

/** The `name=value` of the cookie `name` a response sets. */
const setCookie = (res: request.Response, name: string) => ([] as string[]).concat(res.headers['set-cookie'] ?? []).find((c) => c.startsWith(`${name}=`));

/**
 * Starts a code login for `email` (JSON) and returns its state, the code that reached the outbox,
 * and the login cookie (`ldp_login=…`) the callback needs.
 */
async function startLogin(email: string, skip = 0) {
  const start = await request(base()).get('/api/v1/auth/session/login').query({ email }).set('accept', 'application/json');
  expect(start.status).toBe(202);
  const mail = await waitForMessage(outbox, email, skip);
  return { state: start.body.state as string, code: codeOf(mail), cookie: setCookie(start, 'ldp_login')?.split(';')[0] ?? '' };
}

describe('auth group', () => {
  it('publishes the login configuration without an API key', async () => {
    const res = await request(base()).get('/api/v1/auth/config');
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      network: 'local-discovery', login_methods: ['email_code', 'sms_code'], oidc_issuer: null, guardian_consent_age: 18, consent_version: 1,
    });
    expect(res.body.domains.map((d: { domain: string }) => d.domain)).toEqual(['seeker', 'provider']);
  });

  it('serves the sign-in pages (identifier form, then code form)', async () => {
    const form = await request(base()).get('/api/v1/auth/session/login');
    expect(form.status).toBe(200);
    expect(form.type).toBe('text/html');
    expect(form.text).toContain('name="email"');
    const codeForm = await request(base()).get('/api/v1/auth/session/login').query({ email: 'nobody@example.in' });
    expect(codeForm.status).toBe(200);
    expect(codeForm.text).toContain('name="code"');
    expect(codeForm.text).toContain('action="/api/v1/auth/session/callback"');
  });

  it('logs in with a one-time code, shows the session and the user for the cookie and the bearer token, and logs out', async () => {
    const { state, code, cookie: loginCookie } = await startLogin('ravi@example.in', 1); // the first message is the welcome e-mail
    const login = await request(base()).get('/api/v1/auth/session/callback').query({ state, code }).set('accept', 'application/json').set('cookie', loginCookie);
    expect(login.status).toBe(200);
    const cookie = login.headers['set-cookie'][0] as string;
    expect(cookie).toMatch(/^ldp_session=[A-Za-z0-9_-]{43};/);
    expect(cookie).toMatch(/HttpOnly/);
    expect(cookie).toMatch(/SameSite=Lax/);
    expect(cookie).not.toMatch(/Secure/); // loopback
    expect(login.body).toMatchObject({ user: { name: 'Ravi Kumar', email: 'ravi@example.in', status: 'active' }, token_type: 'Bearer', expires_in: 3600 });
    const sessionCookie = cookie.split(';')[0];

    const session = await request(base()).get('/api/v1/auth/session').set('cookie', sessionCookie);
    expect(session.status).toBe(200);
    expect(session.body).toMatchObject({ authenticated: true, session: { method: 'code' }, user: { email: 'ravi@example.in' } });

    const meCookie = await request(base()).get('/api/v1/auth/me').set('cookie', sessionCookie);
    expect(meCookie.body).toMatchObject({ kind: 'user', via: 'session', user: { name: 'Ravi Kumar' } });
    const meBearer = await request(base()).get('/api/v1/auth/me').set('authorization', `Bearer ${login.body.access_token}`);
    expect(meBearer.body).toMatchObject({ kind: 'user', via: 'bearer', user: { user_id: login.body.user.user_id } });

    const reuse = await request(base()).get('/api/v1/auth/session/callback').query({ state, code }).set('accept', 'application/json').set('cookie', loginCookie);
    expect(reuse.status).toBe(400);
    expect(reuse.body).toEqual({ error: 'invalid_login_state', message: expect.any(String) });

    const logout = await request(base()).post('/api/v1/auth/session/logout').set('cookie', sessionCookie);
    expect(logout.body).toEqual({ ok: true, revoked: true });
    expect(logout.headers['set-cookie'][0]).toMatch(/ldp_session=;/);
    const after = await request(base()).get('/api/v1/auth/session').set('cookie', sessionCookie);
    expect(after.status).toBe(401);
    expect(after.body).toEqual({ error: 'no_session', message: expect.any(String) });
    const { rows } = await platform.ctx.pool.query('SELECT revoked_at FROM signals.sessions');
    expect(rows[0].revoked_at).not.toBeNull();
  });

  it('redirects a browser login to a local return_to only, after rotating the session', async () => {
    const { state, code, cookie } = await startLogin('ravi@example.in', 2);
    await platform.ctx.pool.query(`UPDATE signals.login_flows SET return_to = '/welcome' WHERE state = $1`, [state]);
    const res = await request(base()).get('/api/v1/auth/session/callback').query({ state, code }).set('cookie', `ldp_session=planted; ${cookie}`);
    expect(res.status).toBe(303);
    expect(res.headers.location).toBe('/welcome');
    expect(res.headers['set-cookie'][0]).not.toContain('planted');
    const evil = await request(base()).get('/api/v1/auth/session/login').query({ email: 'nobody@example.in', return_to: '//evil.example/x' }).set('accept', 'application/json');
    const { rows } = await platform.ctx.pool.query('SELECT return_to FROM signals.login_flows WHERE state = $1', [evil.body.state]);
    expect(rows[0].return_to).toBeNull();
  });

  it('binds a login to the browser that started it: a state and code used without its cookie are refused (400 invalid_login_state)', async () => {
    // The attacker starts a login to their own account and sends the victim a link with its state and code.
    expect((await request(base()).post('/api/v1/auth/signup').set('x-api-key', key).send({ name: 'Attacker', email: 'mallory@example.in', age: 30 })).status).toBe(201);
    const { state, code, cookie } = await startLogin('mallory@example.in', 1); // after the welcome e-mail
    const start = await platform.ctx.pool.query('SELECT 1 FROM signals.login_flows WHERE state = $1 AND used_at IS NULL', [state]);
    expect(start.rowCount).toBe(1);
    const victim = await request(base()).get('/api/v1/auth/session/callback').query({ state, code });
    expect(victim.status).toBe(400);
    expect(victim.body).toEqual({ error: 'invalid_login_state', message: expect.any(String) });
    expect(setCookie(victim, 'ldp_session')).toBeUndefined();
    // The victim's own login in progress (another state) does not vouch for the attacker's either.
    const other = await request(base()).get('/api/v1/auth/session/login').query({ email: 'nobody@example.in' });
    const otherCookie = setCookie(other, 'ldp_login')!;
    expect(otherCookie).toMatch(/^ldp_login=[A-Za-z0-9_-]+; Max-Age=600; Path=\/api\/v1\/auth\/session; Expires=[^;]+; HttpOnly; SameSite=Lax$/);
    const mixed = await request(base()).get('/api/v1/auth/session/callback').query({ state, code }).set('cookie', otherCookie.split(';')[0]);
    expect(mixed.status).toBe(400);
    expect(mixed.body.error).toBe('invalid_login_state');
    // Refused before the flow was looked at: no wrong try counted, and the login still works where it started.
    expect((await platform.ctx.pool.query('SELECT 1 FROM signals.one_time_code_failures')).rowCount).toBe(0);
    const own = await request(base()).get('/api/v1/auth/session/callback').query({ state, code }).set('cookie', cookie);
    expect(own.status).toBe(200);
    expect(setCookie(own, 'ldp_session')).toBeDefined();
    // The login cookie is cleared once it served.
    expect(setCookie(own, 'ldp_login')).toMatch(/^ldp_login=;.*Path=\/api\/v1\/auth\/session/);
  });

  it('refuses a wrong code (401 OTP_INVALID), counts it, and locks after 5 wrong tries (429, even for the right code)', async () => {
    const { state, code, cookie } = await startLogin('ravi@example.in', 3);
    const wrongCode = code === '000000' ? '111111' : '000000';
    for (let i = 0; i < 5; i++) {
      const wrong = await request(base()).get('/api/v1/auth/session/callback').query({ state, code: wrongCode }).set('cookie', cookie);
      expect(wrong.status).toBe(401);
      expect(wrong.body).toEqual({ error: 'OTP_INVALID', message: expect.any(String) });
    }
    const locked = await request(base()).get('/api/v1/auth/session/callback').query({ state, code }).set('cookie', cookie);
    expect(locked.status).toBe(429);
    expect(locked.body.error).toBe('OTP_TOO_MANY_TRIES');
    expect(Number(locked.headers['retry-after'])).toBeGreaterThan(0);
  });

  it('answers 401 without credentials, with a bad token, and 400 for a bad query', async () => {
    expect((await request(base()).get('/api/v1/auth/me')).body).toEqual({ error: 'unauthenticated', message: expect.any(String) });
    const bad = await request(base()).get('/api/v1/auth/me').set('authorization', 'Bearer not.a.token');
    expect(bad.status).toBe(401);
    expect(bad.body.error).toBe('invalid_token');
    const stranger = await request(base()).get('/api/v1/auth/me').set('authorization', `Bearer ${await platform.ctx.tokens.issueUser('0b6f3a57-2a3c-4b1e-9d9e-5f6f0d9a1c11', 60)}`);
    expect(stranger.status).toBe(401);
    expect((await request(base()).get('/api/v1/auth/session')).status).toBe(401);
    const noState = await request(base()).get('/api/v1/auth/session/callback').query({ code: '123456' });
    expect(noState.status).toBe(400);
    expect(noState.body.error).toBe('invalid_request');
    const badPhone = await request(base()).get('/api/v1/auth/session/login').query({ phoneNumber: 'abc' });
    expect(badPhone.status).toBe(400);
    const loggedOut = await request(base()).post('/api/v1/auth/session/logout');
    expect(loggedOut.body).toEqual({ ok: true, revoked: false });
  });

  it('prunes expired codes, login flows and old sessions in the signals-prune task (real worker)', async () => {
    const db = platform.ctx.pool;
    await db.query(`UPDATE signals.one_time_codes SET created_at = now() - interval '2 days'`);
    await db.query(`UPDATE signals.login_flows SET expires_at = now() - interval '2 days'`);
    await db.query(`UPDATE signals.sessions SET revoked_at = now() - interval '31 days' WHERE revoked_at IS NOT NULL`);
    const counts = async () => (await db.query(`SELECT (SELECT count(*) FROM signals.one_time_codes)::int AS codes,
      (SELECT count(*) FROM signals.login_flows)::int AS flows, (SELECT count(*) FROM signals.sessions WHERE revoked_at IS NOT NULL)::int AS revoked`)).rows[0];
    expect(await counts()).not.toEqual({ codes: 0, flows: 0, revoked: 0 });
    await enqueue(db, { task: 'signals-prune', payload: {} });
    const deadline = Date.now() + 20_000;
    while ((await db.query(`SELECT 1 FROM graphile_worker.jobs WHERE task_identifier = 'signals-prune'`)).rowCount && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(await counts()).toEqual({ codes: 0, flows: 0, revoked: 0 });
    expect((await db.query('SELECT count(*)::int AS n FROM signals.sessions WHERE revoked_at IS NULL')).rows[0].n).toBeGreaterThan(0);
  });
});
