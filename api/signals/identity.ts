/**
 * Who a signals request acts as, besides its API key: the user of a session cookie, or the
 * identity of a bearer token (`ctx.tokens.verifyAny`: a user token of the built-in issuer, whose
 * `sub` is the user id; a token of the external OIDC issuer, mapped to the user holding its
 * verified `email`; or an aggregator's token). A present but bad credential is a 401, never ignored.
 */
import type { Request } from 'express';
import type { PlatformContext } from '../../lib/context.ts';
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
      const a = verified.aggregator;
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
