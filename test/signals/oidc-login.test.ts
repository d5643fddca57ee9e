/**
 * Login through an external OIDC issuer (OIDC_CLIENT_ID set): a real OpenID Provider (oidc-provider,
 * with its development login and consent pages) on a free port, the browser's redirects followed by
 * hand with its cookies, and signals' callback exchanging the code (PKCE, state, nonce).
 */
import { createServer, type Server } from 'node:http';
import { Provider } from 'oidc-provider';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../lib/platform/free-port.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';

let platform: TestPlatform;
let idp: Server;
let issuer: string;

beforeAll(async () => {
  const [idpPort, signalsPort] = [await freePort(), await freePort()];
  issuer = `http://127.0.0.1:${idpPort}`;
  const callback = `http://127.0.0.1:${signalsPort}/api/v1/auth/session/callback`;
  const provider = new Provider(issuer, {
    clients: [{ client_id: 'ldp-signals', client_secret: 'a-client-secret', redirect_uris: [callback], grant_types: ['authorization_code'], response_types: ['code'] }],
    claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'] },
    conformIdTokenClaims: false,
    ttl: { Interaction: 600, Session: 3600, Grant: 3600, AccessToken: 600, IdToken: 600, AuthorizationCode: 60 },
    async findAccount(_ctx, sub) {
      return { accountId: sub, claims: async () => ({ sub, email: `${sub}@Example.in`, email_verified: sub !== 'unverified', name: 'Meera Iyer' }) };
    },
  });
  idp = createServer(provider.callback());
  await new Promise<void>((resolve) => idp.listen(idpPort, '127.0.0.1', resolve));
  platform = await startTestPlatform({
    services: ['signals'],
    env: {
      SIGNALS_PORT: String(signalsPort), OIDC_ISSUER: issuer, OIDC_JWKS_URL: `${issuer}/jwks`,
      OIDC_CLIENT_ID: 'ldp-signals', OIDC_CLIENT_SECRET: 'a-client-secret',
    },
  });
});
afterAll(async () => {
  await platform?.stop();
  await new Promise<void>((resolve) => idp.close(() => resolve()));
});

/** Follows the browser's way through the provider's login and consent pages; returns signals' callback URL. */
async function signInAtProvider(authorizeUrl: string, account: string): Promise<string> {
  const cookies = new Map<string, string>();
  const go = async (url: string, form?: Record<string, string>) => {
    const res = await fetch(url, {
      method: form ? 'POST' : 'GET', redirect: 'manual',
      headers: { cookie: [...cookies].map(([k, v]) => `${k}=${v}`).join('; '), ...(form ? { 'content-type': 'application/x-www-form-urlencoded' } : {}) },
      body: form ? new URLSearchParams(form).toString() : undefined,
    });
    for (const c of res.headers.getSetCookie()) {
      const [pair] = c.split(';');
      const eq = pair.indexOf('=');
      cookies.set(pair.slice(0, eq), pair.slice(eq + 1));
    }
    return res;
  };
  let url = authorizeUrl;
  for (let step = 0; step < 12; step++) {
    if (url.startsWith(platform.url('signals'))) return url;
    const res = await go(url);
    if (res.status >= 300 && res.status < 400) {
      url = new URL(res.headers.get('location')!, url).href;
      continue;
    }
    const html = await res.text();
    const prompt = /name="prompt" value="(\w+)"/.exec(html)?.[1] ?? (html.includes('name="login"') ? 'login' : 'consent');
    const submitted = await go(url, prompt === 'login' ? { prompt, login: account, password: 'x' } : { prompt });
    url = new URL(submitted.headers.get('location')!, url).href;
  }
  throw new Error('the provider never sent the browser back to signals');
}

/** The `ldp_login=…` cookie a login response sets (the callback needs it: the login is bound to the browser). */
const loginCookie = (res: request.Response) => ([] as string[]).concat(res.headers['set-cookie'] ?? []).find((c) => c.startsWith('ldp_login='))?.split(';')[0] ?? '';

describe('OIDC login', () => {
  it('announces the issuer, redirects with PKCE, state and nonce, and opens a session for the verified e-mail', async () => {
    const config = await request(platform.url('signals')).get('/api/v1/auth/config');
    expect(config.body).toMatchObject({ login_methods: ['oidc'], oidc_issuer: issuer });

    const login = await request(platform.url('signals')).get('/api/v1/auth/session/login');
    expect(login.status).toBe(302);
    const authorize = new URL(login.headers.location);
    expect(authorize.origin).toBe(issuer);
    expect(authorize.searchParams.get('code_challenge_method')).toBe('S256');
    expect(authorize.searchParams.get('state')).toBeTruthy();
    expect(authorize.searchParams.get('nonce')).toBeTruthy();

    const back = new URL(await signInAtProvider(authorize.href, 'meera'));
    const done = await request(platform.url('signals')).get(back.pathname + back.search).set('accept', 'application/json').set('cookie', loginCookie(login));
    expect(done.status).toBe(200);
    expect(done.body).toMatchObject({ session: { method: 'oidc' }, user: { email: 'meera@example.in', name: 'Meera Iyer', status: 'active', created_by: 'oidc' } });
    const cookie = (done.headers['set-cookie'][0] as string).split(';')[0];
    const me = await request(platform.url('signals')).get('/api/v1/auth/me').set('cookie', cookie);
    expect(me.body).toMatchObject({ kind: 'user', via: 'session', user: { email: 'meera@example.in' } });

    const replay = await request(platform.url('signals')).get(back.pathname + back.search).set('cookie', loginCookie(login));
    expect(replay.status).toBe(400);
    expect(replay.body.error).toBe('invalid_login_state');
  });

  it('binds the login to the browser that started it: the issuer\'s answer is refused elsewhere (400 invalid_login_state)', async () => {
    // An attacker's own login, its callback URL sent to a victim whose browser holds no (or another) login cookie.
    const login = await request(platform.url('signals')).get('/api/v1/auth/session/login');
    expect(loginCookie(login)).toMatch(/^ldp_login=.+/);
    const back = new URL(await signInAtProvider(login.headers.location, 'mallory'));
    const other = await request(platform.url('signals')).get('/api/v1/auth/session/login');
    for (const cookie of ['', loginCookie(other)]) {
      const victim = await request(platform.url('signals')).get(back.pathname + back.search).set('cookie', cookie);
      expect(victim.status).toBe(400);
      expect(victim.body).toEqual({ error: 'invalid_login_state', message: expect.any(String) });
    }
    const own = await request(platform.url('signals')).get(back.pathname + back.search).set('accept', 'application/json').set('cookie', loginCookie(login));
    expect(own.status).toBe(200);
    expect(own.body.user.email).toBe('mallory@example.in');
  });

  it('refuses an account whose e-mail is not verified (403)', async () => {
    const login = await request(platform.url('signals')).get('/api/v1/auth/session/login');
    const back = new URL(await signInAtProvider(login.headers.location, 'unverified'));
    const done = await request(platform.url('signals')).get(back.pathname + back.search).set('cookie', loginCookie(login));
    expect(done.status).toBe(403);
    expect(done.body).toEqual({ error: 'email_not_verified', message: expect.any(String) });
  });

  it('refuses a tampered code (401 oidc_login_failed)', async () => {
    const login = await request(platform.url('signals')).get('/api/v1/auth/session/login');
    const back = new URL(await signInAtProvider(login.headers.location, 'meera'));
    back.searchParams.set('code', 'tampered');
    const done = await request(platform.url('signals')).get(back.pathname + back.search).set('cookie', loginCookie(login));
    expect(done.status).toBe(401);
    expect(done.body.error).toBe('oidc_login_failed');
  });
});
