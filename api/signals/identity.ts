/**
 * Who a signals request acts as, besides its API key: the user of a session cookie, or the
 * identity of a bearer token (`ctx.tokens.verifyAny`: a user token of the built-in issuer, whose
 * `sub` is the user id; a token of the external OIDC issuer, mapped to the user holding its
 * verified `email`; or an aggregator's token). A present but bad credential is a 401, never ignored.
 *
 * An aggregator's token is also put to the aggregator service (lib/clients/aggregator-client.ts,
 * its `GET /v1/me`), at most once a second per token: a suspended aggregator, or one of a
 * suspended organisation, is refused here as there (docs/decisions.md, "Trust II": signals had
 * taken an aggregator's token at its word until it expired).
 */
import type { Request } from 'express';
import type { PlatformContext } from '../../lib/context.ts';
import { AggregatorUnavailableError, createAggregatorClient, type CallerCheck } from '../../lib/clients/aggregator-client.ts';
import { ReadCache } from '../../lib/platform/read-cache.ts';
import { TokenError } from '../../lib/platform/tokens.ts';
import { contactKeys, findUserByKeys, getUser, normaliseEmail } from '../../lib/signals/people.ts';
import { findSession, SESSION_COOKIE, type Session } from '../../lib/signals/sessions.ts';
import { HttpError } from '../http/errors.ts';

export type Identity =
  | { kind: 'user'; userId: string; via: 'session'; session: Session }
  | { kind: 'user'; userId: string; via: 'bearer' }
  | { kind: 'aggregator'; via: 'bearer'; aggregatorId: string; orgId: string; types: string[]; roles: string[] };

/** The value of cookie `name` in the request, or undefined. */
export function cookieOf(req: Request, name: string): string | undefined {
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) {
      try {
        return decodeURIComponent(part.slice(eq + 1).trim());
      } catch {
        return undefined;
      }
    }
  }
  return undefined;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** How long an aggregator token's check by the aggregator service is reused (as the aggregator service's own CALLER_CACHE_MS). */
export const AGGREGATOR_CHECK_MS = 1000;

/** Per process: the aggregator service's answers for tokens, each reused AGGREGATOR_CHECK_MS (refusals never). */
const checks = new WeakMap<PlatformContext, ReadCache<CallerCheck>>();
function aggregatorChecks(ctx: PlatformContext): ReadCache<CallerCheck> {
  let cache = checks.get(ctx);
  if (!cache) {
    // ctx.urls are final once the services listen: the client is made at the first check.
    let client: ReturnType<typeof createAggregatorClient> | undefined;
    cache = new ReadCache<CallerCheck>({
      read: (token) => (client ??= createAggregatorClient({ baseUrl: ctx.urls.aggregator })).caller(token),
      maxAgeMs: AGGREGATOR_CHECK_MS, max: 10_000, keep: (check) => check.ok,
    });
    checks.set(ctx, cache);
  }
  return cache;
}

/**
 * The aggregator a verified aggregator `token` names, as the aggregator service sees it now: its
 * registered types and the token's roles.
 * @throws HttpError 401/403 with the aggregator service's code (unknown, suspended), 503
 *   `aggregator_unavailable` when it cannot be asked (an aggregator's token is then not taken).
 */
async function checkedAggregator(ctx: PlatformContext, token: string) {
  let check: CallerCheck | undefined;
  try {
    check = await aggregatorChecks(ctx).get(token);
  } catch (err) {
    if (!(err instanceof AggregatorUnavailableError)) throw err;
    throw new HttpError(503, `An aggregator's token cannot be checked now (the aggregator service does not answer); try again shortly`,
      { code: 'aggregator_unavailable', headers: { 'Retry-After': '5' } });
  }
  if (!check?.ok) {
    throw new HttpError(check?.status ?? 401, `The aggregator service refuses this token: ${check?.message ?? 'unknown'}`, { code: check?.code ?? 'invalid_token' });
  }
  return check.caller;
}

/**
 * The identity of `req` — a bearer token first (an explicit credential), else the session cookie —
 * or null when it carries neither.
 * @throws HttpError 401 `invalid_token` (bad, expired, untrusted token, or one naming no user),
 *   401 `invalid_session` (a cookie whose session is unknown, expired or revoked) when `strictCookie`.
 */
export async function identify(ctx: PlatformContext, req: Request, options: { strictCookie?: boolean } = {}): Promise<Identity | null> {
  const header = req.header('authorization');
  if (header) {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (!match) throw new HttpError(401, 'Authorization must be "Bearer <token>"', { code: 'invalid_token' });
    let verified;
    try {
      verified = await ctx.tokens.verifyAny(match[1]);
    } catch (err) {
      if (err instanceof TokenError) throw new HttpError(401, `Invalid bearer token: ${err.message}`, { code: 'invalid_token' });
      throw err;
    }
    if (verified.aggregator) {
      const a = await checkedAggregator(ctx, match[1]);
      return { kind: 'aggregator', via: 'bearer', aggregatorId: a.aggregator_id, orgId: a.org_id, types: a.aggregator_type, roles: a.roles };
    }
    let userId: string | null = null;
    if (verified.issuer === ctx.config.JWT_ISSUER) {
      const user = UUID.test(verified.sub) ? await getUser(ctx.pool, verified.sub) : null;
      if (user && user.status !== 'disabled') userId = user.user_id;
    } else if (typeof verified.payload.email === 'string' && verified.payload.email_verified === true) {
      const user = await findUserByKeys(ctx.pool, contactKeys(ctx.pii, { email: normaliseEmail(verified.payload.email) }));
      if (user && user.status !== 'disabled') userId = user.user_id;
    }
    if (!userId) throw new HttpError(401, 'Bearer token names no active user of this platform', { code: 'invalid_token' });
    return { kind: 'user', userId, via: 'bearer' };
  }
  const token = cookieOf(req, SESSION_COOKIE);
  if (!token) return null;
  const session = await findSession(ctx.pool, token);
  if (!session) {
    if (options.strictCookie) throw new HttpError(401, 'The session has expired or was logged out', { code: 'invalid_session' });
    return null;
  }
  return { kind: 'user', userId: session.user_id, via: 'session', session };
}
