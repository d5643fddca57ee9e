/**
 * The auth group of the signals service (spec lists it by name only; decided in docs/decisions.md,
 * "People, consent and actions"). Reachable without an API key — a browser holds no key:
 * - `GET  /api/v1/auth/config`            public login configuration
 * - `GET  /api/v1/auth/session/login`     OIDC: redirect to the issuer (code flow + PKCE, state, nonce;
 *                                          openid-client). Built-in: a page asking for an e-mail or phone;
 *                                          with `email`/`phoneNumber`, sends a one-time code and shows the code form
 * - `GET  /api/v1/auth/session/callback`  OIDC: `code`, `state` from the issuer. Built-in: `state`, `code` from
 *                                          the form. Only in the browser (or client) holding the login cookie of
 *                                          that state. Opens a session (cookie), then redirects to `return_to` (a
 *                                          local path) or, for `Accept: application/json`, answers the user and a
 *                                          bearer token
 * - `GET  /api/v1/auth/session`           the session and its user, or 401
 * - `POST /api/v1/auth/session/logout`    revokes the session server-side, clears the cookie
 * - `GET  /api/v1/auth/me`                the user (or aggregator) of a session cookie or a bearer token, or 401
 * Errors in shape A.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { Router, type Request, type Response } from 'express';
import * as oidc from 'openid-client';
import { z } from 'zod';
import type { PlatformContext } from '../../lib/context.ts';
import { withTransaction } from '../../lib/platform/db.ts';
import { enqueueMessage } from '../../lib/signals/messages.ts';
import { createRateLimit } from '../../lib/signals/rate-limits.ts';
import { consumeCode, createCode, OneTimeCodeError } from '../../lib/signals/one-time-codes.ts';
import {
  contactKeys, encryptPerson, findOrCreateUser, findUserByKeys, getUserProfile, normaliseEmail, normalisePhone, type Contact,
} from '../../lib/signals/people.ts';
import {
  createSession, findSession, finishLoginFlow, findLoginFlow, LOGIN_COOKIE, LOGIN_COOKIE_PATH, LOGIN_FLOW_TTL_SECONDS, revokeSession,
  SESSION_COOKIE, startLoginFlow, type LoginFlow,
} from '../../lib/signals/sessions.ts';
import { HttpError } from '../http/errors.ts';
import type { RouteDoc } from '../http/route-doc.ts';
import { parse } from '../http/validation.ts';
import { cookieOf, identify } from './identity.ts';
import { asHttp } from './people.ts';

/** Lifetime of the bearer token handed to JSON clients at login, seconds. */
export const LOGIN_TOKEN_TTL_SECONDS = 3600;

const LOOPBACK = new Set(['localhost', '127.0.0.1', '::1', '[::1]']);
export const loginQuery = z.object({
  email: z.email().max(320).optional(),
  phoneNumber: z.string().min(3).max(20).optional(),
  return_to: z.string().max(500).optional(),
});
export const callbackQuery = z.object({ state: z.string().min(1).max(200), code: z.string().min(1).max(2000) });

const escape = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
const page = (title: string, body: string) => `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escape(title)}</title>
<style>body{font-family:system-ui,sans-serif;max-width:28rem;margin:3rem auto;padding:0 1rem}label,input,button{display:block;width:100%;margin:.4rem 0;font-size:1rem}input,button{padding:.5rem}</style>
</head><body><h1>${escape(title)}</h1>${body}</body></html>`;

/** A same-site path to return to (never another origin: no open redirect), or null. */
const localPath = (p: string | undefined | null) => (p && /^\/(?![/\\])[^\s]*$/.test(p) ? p : null);
const wantsJson = (req: Request) => req.accepts(['html', 'json']) === 'json';
/** The login cookie's attributes: as the session cookie's, but sent to the login routes only. */
const loginCookie = (req: Request) => ({ httpOnly: true, secure: !LOOPBACK.has(req.hostname), sameSite: 'lax' as const, path: LOGIN_COOKIE_PATH });
/** Binds the flow of `state` to this browser (or cookie-keeping client): the callback needs the cookie. */
const bindLogin = (req: Request, res: Response, state: string) => {
  res.cookie(LOGIN_COOKIE, state, { ...loginCookie(req), maxAge: LOGIN_FLOW_TTL_SECONDS * 1000 });
};
const digest = (s: string) => createHash('sha256').update(s).digest();
/** Whether the request carries the login cookie of `state` (compared in constant time). */
const boundHere = (req: Request, state: string) => {
  const held = cookieOf(req, LOGIN_COOKIE);
  return held !== undefined && timingSafeEqual(digest(held), digest(state));
};

export function authRoutes(ctx: PlatformContext): Router {
  const router = Router();
  const region = ctx.network.defaultPhoneRegion;
  // Code logins started per client IP and hour (each user also gets at most 3 codes an hour).
  const loginPerIp = createRateLimit(ctx.pool, 'login-ip', ctx.config.SIGNUP_LIMIT_PER_IP * 2, 3600);
  const oidcEnabled = Boolean(ctx.config.OIDC_CLIENT_ID && ctx.config.OIDC_ISSUER);
  const callbackUrl = () => ctx.config.OIDC_REDIRECT_URL ?? new URL('/api/v1/auth/session/callback', ctx.urls.signals).href;
  let oidcConfig: Promise<oidc.Configuration> | undefined;
  const oidcClient = () => {
    oidcConfig ??= oidc.discovery(new URL(ctx.config.OIDC_ISSUER!), ctx.config.OIDC_CLIENT_ID!, ctx.config.OIDC_CLIENT_SECRET,
      undefined, new URL(ctx.config.OIDC_ISSUER!).protocol === 'http:' ? { execute: [oidc.allowInsecureRequests] } : undefined)
      .catch((err) => { oidcConfig = undefined; throw err; });
    return oidcConfig;
  };

  /** Opens a session for `userId`, sets its cookie, and answers (JSON with a bearer token, or a redirect). */
  const signIn = async (req: Request, res: Response, userId: string, method: string, returnTo: string | null) => {
    const { token, session } = await createSession(ctx.pool, userId, method, ctx.config.SESSION_TTL_SECONDS, cookieOf(req, SESSION_COOKIE));
    res.cookie(SESSION_COOKIE, token, {
      httpOnly: true, secure: !LOOPBACK.has(req.hostname), sameSite: 'lax', path: '/', maxAge: ctx.config.SESSION_TTL_SECONDS * 1000,
    });
    res.clearCookie(LOGIN_COOKIE, loginCookie(req));
    if (wantsJson(req)) {
      const user = await getUserProfile(ctx.pool, ctx.pii, userId);
      res.json({
        session: { session_id: session.session_id, method, created_at: session.created_at, expires_at: session.expires_at },
        user, access_token: await ctx.tokens.issueUser(userId, LOGIN_TOKEN_TTL_SECONDS), token_type: 'Bearer', expires_in: LOGIN_TOKEN_TTL_SECONDS,
      });
      return;
    }
    if (returnTo) {
      res.redirect(303, returnTo);
      return;
    }
    res.type('html').send(page('Signed in', '<p>You are signed in. You can close this page.</p>'));
  };

  router.get('/auth/config', (_req, res) => {
    res.json({
      network: ctx.network.id,
      network_name: ctx.network.name,
      domains: [...ctx.network.domains.values()].map((d) => ({ domain: d.name, label: d.label, item_type: d.itemType })),
      login_methods: oidcEnabled ? ['oidc'] : ['email_code', 'sms_code'],
      oidc_issuer: oidcEnabled ? ctx.config.OIDC_ISSUER : null,
      guardian_consent_age: ctx.network.people.guardian_consent_age,
      consent_version: ctx.network.people.consent_version,
      session_cookie: SESSION_COOKIE,
      login_url: '/api/v1/auth/session/login',
    });
  });

  router.get('/auth/session/login', async (req, res) => {
    const query = parse(loginQuery, req.query, 'query');
    const returnTo = localPath(query.return_to);
    if (oidcEnabled) {
      const config = await oidcClient().catch((err) => {
        req.log.error({ err }, 'OIDC discovery failed');
        throw new HttpError(502, 'The identity provider cannot be reached', { code: 'oidc_unavailable' });
      });
      const codeVerifier = oidc.randomPKCECodeVerifier();
      const flow = await startLoginFlow(ctx.pool, { kind: 'oidc', state: oidc.randomState(), nonce: oidc.randomNonce(), codeVerifier, returnTo });
      const url = oidc.buildAuthorizationUrl(config, {
        redirect_uri: callbackUrl(), scope: 'openid email profile', state: flow.state, nonce: flow.nonce!,
        code_challenge: await oidc.calculatePKCECodeChallenge(codeVerifier), code_challenge_method: 'S256',
      });
      bindLogin(req, res, flow.state);
      res.redirect(302, url.href);
      return;
    }
    if (query.email === undefined && query.phoneNumber === undefined) {
      res.type('html').send(page('Sign in', `<form method="get" action="/api/v1/auth/session/login">
<label for="email">E-mail</label><input id="email" name="email" type="email" autocomplete="email">
<label for="phone">or mobile number</label><input id="phone" name="phoneNumber" type="tel" autocomplete="tel">
${returnTo ? `<input type="hidden" name="return_to" value="${escape(returnTo)}">` : ''}
<button type="submit">Send me a code</button></form>`));
      return;
    }
    const contact: Contact = query.email !== undefined ? { email: normaliseEmail(query.email) } : {};
    if (query.phoneNumber !== undefined && !contact.email) {
      const phone = normalisePhone(query.phoneNumber, region);
      if (!phone) throw new HttpError(400, 'phoneNumber: not a valid phone number', { code: 'invalid_request' });
      contact.phone = phone;
    }
    await loginPerIp.consume(req.ip ?? 'unknown').catch((err) => { throw asHttp(err); });
    // The same answer whether or not the contact is registered (no account enumeration).
    const flow = await withTransaction(ctx.pool, async (client) => {
      const user = await findUserByKeys(client, contactKeys(ctx.pii, contact));
      const active = user && user.status !== 'disabled' ? user : null;
      const started = await startLoginFlow(client, { kind: 'code', userId: active?.user_id ?? null, returnTo });
      if (active) {
        const code = await createCode(client, ctx.pii, `login:${active.user_id}`);
        await enqueueMessage(client, ctx.pii, { kind: 'login_code', contact, code, networkName: ctx.network.name });
      }
      return started;
    }).catch((err) => { throw asHttp(err); });
    bindLogin(req, res, flow.state);
    if (wantsJson(req)) {
      res.status(202).json({ state: flow.state, code_sent: true, expires_in: LOGIN_FLOW_TTL_SECONDS });
      return;
    }
    res.type('html').send(page('Enter your code', `<p>If ${escape(contact.email ?? contact.phone!)} is registered, a 6-digit code is on its way.</p>
<form method="get" action="/api/v1/auth/session/callback">
<input type="hidden" name="state" value="${escape(flow.state)}">
<label for="code">Code</label><input id="code" name="code" inputmode="numeric" pattern="[0-9]{6}" maxlength="6" autocomplete="one-time-code" required>
<button type="submit">Sign in</button></form>`));
  });

  router.get('/auth/session/callback', async (req, res) => {
    const query = parse(callbackQuery, req.query, 'query');
    // Login CSRF: a state (and code) started elsewhere, e.g. an attacker's own login sent to a victim, is refused
    // before the flow is looked at (so it is not used up, nor a wrong try counted).
    if (!boundHere(req, query.state)) {
      throw new HttpError(400, 'This login was not started in this browser (or its cookie expired); start again', { code: 'invalid_login_state' });
    }
    // The flow is checked and used in a transaction that commits even when the code is wrong, so wrong tries count.
    let failure: unknown;
    const flow = await withTransaction(ctx.pool, async (client): Promise<LoginFlow | null> => {
      const found = await findLoginFlow(client, query.state);
      if (!found) return null;
      if (found.kind === 'code') {
        try {
          await consumeCode(client, ctx.pii, `login:${found.user_id ?? found.flow_id}`, query.code);
        } catch (err) {
          if (!(err instanceof OneTimeCodeError)) throw err;
          failure = err;
          return found;
        }
      }
      await finishLoginFlow(client, found.flow_id);
      return found;
    });
    if (!flow) throw new HttpError(400, 'The login has expired or was already used; start again', { code: 'invalid_login_state' });
    if (failure) throw asHttp(failure);
    if (flow.kind === 'code') {
      await signIn(req, res, flow.user_id!, 'code', flow.return_to);
      return;
    }
    const config = await oidcClient();
    const current = new URL(req.originalUrl, callbackUrl());
    let claims: oidc.IDToken | undefined;
    try {
      const tokens = await oidc.authorizationCodeGrant(config, current, {
        pkceCodeVerifier: flow.code_verifier!, expectedState: flow.state, expectedNonce: flow.nonce!, idTokenExpected: true,
      });
      claims = tokens.claims();
    } catch (err) {
      req.log.info({ err }, 'OIDC code exchange refused');
      throw new HttpError(401, 'The identity provider did not confirm the login', { code: 'oidc_login_failed' });
    }
    if (!claims || typeof claims.email !== 'string' || claims.email_verified !== true) {
      throw new HttpError(403, 'The identity provider gave no verified e-mail address', { code: 'email_not_verified' });
    }
    const email = normaliseEmail(claims.email);
    const name = typeof claims.name === 'string' ? claims.name : undefined;
    const { user } = await withTransaction(ctx.pool, (client) => findOrCreateUser(client, {
      ...encryptPerson(ctx.pii, name, { email }), network: ctx.network.id, status: 'active', createdBy: 'oidc',
    }));
    if (user.status === 'disabled') throw new HttpError(403, 'This user is disabled', { code: 'user_disabled' });
    await signIn(req, res, user.user_id, 'oidc', flow.return_to);
  });

  router.get('/auth/session', async (req, res) => {
    const token = cookieOf(req, SESSION_COOKIE);
    const session = token ? await findSession(ctx.pool, token) : null;
    if (!session) throw new HttpError(401, 'No session: sign in at /api/v1/auth/session/login', { code: 'no_session' });
    res.json({
      authenticated: true,
      session: { session_id: session.session_id, method: session.method, created_at: session.created_at, expires_at: session.expires_at },
      user: await getUserProfile(ctx.pool, ctx.pii, session.user_id),
    });
  });

  router.post('/auth/session/logout', async (req, res) => {
    const token = cookieOf(req, SESSION_COOKIE);
    const revoked = token ? await revokeSession(ctx.pool, token) : false;
    res.clearCookie(SESSION_COOKIE, { httpOnly: true, secure: !LOOPBACK.has(req.hostname), sameSite: 'lax', path: '/' });
    res.json({ ok: true, revoked });
  });

  router.get('/auth/me', async (req, res) => {
    const who = await identify(ctx, req);
    if (!who) throw new HttpError(401, 'Sign in (session cookie) or send a bearer token', { code: 'unauthenticated' });
    if (who.kind === 'aggregator') {
      res.json({ kind: 'aggregator', via: who.via, aggregator: { aggregator_id: who.aggregatorId, org_id: who.orgId, aggregator_type: who.types, roles: who.roles } });
      return;
    }
    res.json({ kind: 'user', via: who.via, user: await getUserProfile(ctx.pool, ctx.pii, who.userId) });
  });

  return router;
}

/** A user as signals shows it to the user (decrypted contacts; lib/signals/people.ts getUserProfile). */
export const userProfileSchema = z.looseObject({
  user_id: z.uuid(), network: z.string(), domain: z.string().nullable(), status: z.string(), created_by: z.string().nullable(),
  created_at: z.string(), age: z.int().nullable(), name: z.string().nullable(), phone: z.string().nullable(), email: z.string().nullable(),
}).meta({ id: 'UserProfile' });
const sessionSchema = z.object({ session_id: z.uuid(), method: z.string(), created_at: z.string(), expires_at: z.string() });
const signedInSchema = z.object({
  session: sessionSchema, user: userProfileSchema.nullable(), access_token: z.string().meta({ description: 'a bearer token of the user' }),
  token_type: z.literal('Bearer'), expires_in: z.int().meta({ description: 'seconds' }),
});
const authConfigSchema = z.object({
  network: z.string(), network_name: z.string(),
  domains: z.array(z.object({ domain: z.string(), label: z.string().optional(), item_type: z.string() })),
  login_methods: z.array(z.enum(['oidc', 'email_code', 'sms_code'])), oidc_issuer: z.string().nullable(),
  guardian_consent_age: z.int(), consent_version: z.int(), session_cookie: z.string(), login_url: z.string(),
});
const html = (description: string) => ({ description, content: [{ type: 'text/html', schema: z.string() }] });
const byCookie = `Reads the session cookie \`${SESSION_COOKIE}\` set at login.`;

/** Docs of `authRoutes`: public (no API key: a browser holds none). */
export const authRouteDocs: RouteDoc[] = [
  {
    method: 'GET', path: '/api/v1/auth/config', summary: 'Public login configuration', tags: ['auth'], security: 'none',
    responses: { 200: { description: 'How to sign in on this network', schema: authConfigSchema } },
  },
  {
    method: 'GET', path: '/api/v1/auth/session/login', summary: 'Start a login', tags: ['auth'], security: 'none',
    description: 'With OIDC configured: redirect to the issuer (code flow with PKCE). Built-in: without `email`/`phoneNumber` a page asking for one; with one, a one-time code is sent when the contact is registered (the answer is the same either way) and the code form is shown, or for `Accept: application/json` 202 with the login `state`. '
      + `A started login sets the cookie \`${LOGIN_COOKIE}\` (HttpOnly, SameSite=Lax, Path=${LOGIN_COOKIE_PATH}, 10 minutes), which the callback needs: JSON clients keep it too.`,
    query: loginQuery,
    responses: {
      200: html('The sign-in page or the code form'),
      202: { description: 'Code sent if the contact is registered (JSON clients)', schema: z.object({ state: z.string(), code_sent: z.literal(true), expires_in: z.int() }) },
      302: { description: 'Redirect to the OIDC issuer' },
    },
    errors: { 429: 'Too many code logins from this address (Retry-After)', 502: 'The identity provider cannot be reached' },
  },
  {
    method: 'GET', path: '/api/v1/auth/session/callback', summary: 'Finish a login and open a session (cookie)', tags: ['auth'], security: 'none',
    description: 'OIDC: `code` and `state` from the issuer. Built-in: `state` and the one-time `code` of the form. '
      + `Only with the cookie \`${LOGIN_COOKIE}\` of that state, set by the login (else 400 invalid_login_state). `
      + 'Sets the session cookie; answers the user and a bearer token for `Accept: application/json`, else redirects to `return_to` or shows a page.',
    query: callbackQuery,
    responses: {
      200: { description: 'Signed in', schema: signedInSchema, content: [{ type: 'text/html', schema: z.string() }] },
      303: { description: 'Signed in: redirect to return_to' },
    },
    errors: {
      400: 'Invalid request, or the login expired, was already used or was started in another browser (invalid_login_state)', 401: 'Wrong code, or the identity provider did not confirm the login',
      403: 'No verified e-mail from the identity provider, or the user is disabled', 410: 'The code has expired', 429: 'Too many wrong codes',
    },
  },
  {
    method: 'GET', path: '/api/v1/auth/session', summary: 'The session of the cookie and its user', tags: ['auth'], security: 'none', description: byCookie,
    responses: { 200: { description: 'The session', schema: z.object({ authenticated: z.literal(true), session: sessionSchema, user: userProfileSchema.nullable() }) } },
    errors: { 401: 'No session' },
  },
  {
    method: 'POST', path: '/api/v1/auth/session/logout', summary: 'Revoke the session and clear its cookie', tags: ['auth'], security: 'none', description: byCookie,
    responses: { 200: { description: 'Signed out', schema: z.object({ ok: z.literal(true), revoked: z.boolean() }) } },
  },
  {
    method: 'GET', path: '/api/v1/auth/me', summary: 'The user (or aggregator) of a session cookie or bearer token', tags: ['auth'], security: 'none',
    description: `${byCookie} Or send \`Authorization: Bearer <JWT>\` of a user or an aggregator.`,
    responses: {
      200: {
        description: 'Who the caller is',
        schema: z.union([
          z.object({ kind: z.literal('user'), via: z.string(), user: userProfileSchema.nullable() }),
          z.object({ kind: z.literal('aggregator'), via: z.string(), aggregator: z.object({ aggregator_id: z.uuid(), org_id: z.uuid(), aggregator_type: z.array(z.string()), roles: z.array(z.string()) }) }),
        ]),
      },
    },
    errors: { 401: 'Neither a session nor a valid bearer token' },
  },
];
