/**
 * The operator console (issue 18; docs/decisions.md "Operator console"): server-rendered pages
 * under /console/ on the aggregator service, for the same aggregator roles as the API.
 *
 * Sign-in: `ldp console --aggregator ID` prints /console/login?token=… with a short-lived
 * single-use console link token (built-in issuer, purpose "console-login", refused by every
 * bearer route: lib/platform/tokens.ts `issueForPurpose`); posting the sign-in
 * form exchanges it once for a server-side session (aggregator.console_sessions) behind an
 * HttpOnly, SameSite=Lax cookie (Secure unless served on loopback). Every unsafe request carries a
 * CSRF token (csrf-csrf, double-submit cookie bound to the session). Pages work without
 * JavaScript; htmx (served from node_modules) and a small script add the live parts.
 */
import { createHmac } from 'node:crypto';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import cookieParser from 'cookie-parser';
import { doubleCsrf } from 'csrf-csrf';
import express, { Router, type ErrorRequestHandler, type Request, type Response } from 'express';
import {
  CONSOLE_LINK_PURPOSE, consumeConsoleLink, createConsoleSession, deleteConsoleSession, findConsoleSession,
} from '../../lib/aggregator/console/sessions.ts';
import type { PlatformContext } from '../../lib/context.ts';
import { aggregatorClaimsSchema, TokenError } from '../../lib/platform/tokens.ts';
import { resolveCaller } from '../http/auth.ts';
import { HttpError } from '../http/errors.ts';
import { streamCaller } from '../http/event-stream.ts';
import { dashboardPages } from './dashboard-pages.ts';
import { linkPages } from './link-pages.ts';
import { otherPages } from './other-pages.ts';
import { LANG_COOKIE, LANGUAGES, renderPage, translator, languageOf } from './render.ts';
import { uploadPages } from './upload-pages.ts';

export const SESSION_COOKIE = 'ldp_console';
const CSRF_COOKIE = 'ldp_console_csrf';
/** Console sessions last this long (s). */
export const CONSOLE_SESSION_SECONDS = 8 * 3600;
const HERE = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);

const isLoopback = (req: Request) => ['localhost', '127.0.0.1', '[::1]', '::1'].includes(req.hostname);

/** The console's router (mount at /console before bearerAuth). */
export function consoleRoutes(ctx: PlatformContext): Router {
  const router = Router();
  const cookieOptions = (req: Request) => ({ httpOnly: true, sameSite: 'lax' as const, secure: !isLoopback(req), path: '/console' });

  router.use((_req, res, next) => {
    // Pages never embed elsewhere, load nothing from another origin, and leak no URL (with its CSRF query) in Referer.
    res.set({
      'Content-Security-Policy': "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'",
      'Referrer-Policy': 'same-origin', 'X-Content-Type-Options': 'nosniff',
    });
    next();
  });
  router.use(cookieParser());
  router.use(express.urlencoded({ extended: false, limit: '64kb' }));

  router.get('/static/htmx.min.js', (_req, res) => {
    res.type('js').set('Cache-Control', 'public, max-age=3600').sendFile(require.resolve('htmx.org/dist/htmx.min.js'));
  });
  router.use('/static', express.static(path.join(HERE, 'static'), { maxAge: '1h', index: false }));

  // One configuration for https and one for loopback http, where a Secure cookie would not be kept.
  const csrf = (secure: boolean) => doubleCsrf({
    // Derived from the internal key, so every process of one deployment checks the same tokens.
    getSecret: () => createHmac('sha256', ctx.internalApiKey).update('ldp console csrf').digest('base64url'),
    getSessionIdentifier: (req) => (req.cookies as Record<string, string>)[SESSION_COOKIE] ?? '',
    cookieName: CSRF_COOKIE,
    cookieOptions: { sameSite: 'lax', path: '/console', httpOnly: true, secure },
    // A form field; a multipart form (whose body is streamed to storage) sends it in the query.
    getCsrfTokenFromRequest: (req) => (req.body as Record<string, string> | undefined)?._csrf
      ?? (req.is('multipart/form-data') ? req.query._csrf as string | undefined : undefined) ?? req.header('x-csrf-token'),
    errorConfig: { statusCode: 403, message: 'The form has expired or did not come from this console; reload the page and try again', code: 'invalid_csrf_token' },
  });
  const csrfSecure = csrf(true);
  const csrfLoopback = csrf(false);
  router.use((req, res, next) => {
    const { generateCsrfToken, doubleCsrfProtection } = isLoopback(req) ? csrfLoopback : csrfSecure;
    res.locals.csrfToken = generateCsrfToken(req, res);
    doubleCsrfProtection(req, res, next);
  });

  router.post('/lang', (req, res) => {
    const lang = String((req.body as Record<string, string>).lang ?? '');
    if ((LANGUAGES as readonly string[]).includes(lang)) res.cookie(LANG_COOKIE, lang, { ...cookieOptions(req), maxAge: 365 * 86400_000 });
    const back = String((req.body as Record<string, string>).back ?? '/console/uploads');
    res.redirect(303, back.startsWith('/console/') && !back.startsWith('//') ? back : '/console/uploads');
  });

  router.get('/login', (req, res) => {
    renderPage(req, res, 'login', { token: typeof req.query.token === 'string' ? req.query.token : '' });
  });

  router.post('/login', async (req, res) => {
    const t = translator(languageOf(req));
    const token = String((req.body as Record<string, string>).token ?? '');
    const refuse = (message: string) => renderPage(req, res, 'login', { token: '', problem: message }, 401);
    let verified;
    try {
      // Only a console link: a bearer token (or any other purpose's) is refused, as bearer routes refuse a link.
      verified = await ctx.tokens.verifyPurpose(token, CONSOLE_LINK_PURPOSE);
    } catch (err) {
      if (!(err instanceof TokenError)) throw err;
      refuse(t('login.invalid'));
      return;
    }
    const parsed = aggregatorClaimsSchema.safeParse(verified.payload);
    const { jti, exp } = verified.payload as { jti?: string; exp?: number };
    if (!parsed.success || !jti || !exp) {
      refuse(t('login.invalid'));
      return;
    }
    const claims = parsed.data;
    if (!await consumeConsoleLink(ctx.pool, jti, new Date(exp * 1000))) {
      refuse(t('login.used'));
      return;
    }
    await resolveCaller(ctx, claims);
    const value = await createConsoleSession(ctx.pool, claims, CONSOLE_SESSION_SECONDS);
    res.cookie(SESSION_COOKIE, value, { ...cookieOptions(req), maxAge: CONSOLE_SESSION_SECONDS * 1000 });
    res.redirect(303, '/console/uploads');
  });

  router.post('/logout', async (req, res) => {
    const value = (req.cookies as Record<string, string>)[SESSION_COOKIE];
    if (value) await deleteConsoleSession(ctx.pool, value);
    res.clearCookie(SESSION_COOKIE, cookieOptions(req));
    res.redirect(303, '/console/login?signed_out=1');
  });

  // Everything below needs a session.
  router.use(async (req, res, next) => {
    const value = (req.cookies as Record<string, string>)[SESSION_COOKIE];
    const claims = value ? await findConsoleSession(ctx.pool, value) : null;
    if (!claims) {
      if (req.method === 'GET' && req.accepts('html') && req.header('accept') !== 'text/event-stream') {
        res.redirect(303, '/console/login');
        return;
      }
      throw new HttpError(401, translator(languageOf(req))('error.signin'), { code: 'not_signed_in' });
    }
    res.locals.caller = await resolveCaller(ctx, claims);
    // Event streams look the session up again before each read: sign-out or expiry ends them.
    res.locals.streamCaller = streamCaller(ctx, claims.aggregator_id, () => findConsoleSession(ctx.pool, value!));
    next();
  });
  router.get('/', (_req, res) => res.redirect(303, '/console/uploads'));
  router.use(uploadPages(ctx), linkPages(ctx), dashboardPages(ctx), otherPages(ctx));

  router.use((req, _res, next) => next(new HttpError(404, translator(languageOf(req))('error.notfound'))));
  const errors: ErrorRequestHandler = (err, req, res, _next) => {
    const status = err instanceof HttpError ? err.status : (err as { statusCode?: number }).statusCode ?? 500;
    if (status >= 500) req.log.error({ err }, 'console request failed');
    if (res.headersSent) {
      res.end();
      return;
    }
    const message = status >= 500 ? translator(languageOf(req))('error.internal') : (err as Error).message;
    renderPage(req, res as Response, 'error', { status, message }, status);
  };
  router.use(errors);
  return router;
}
