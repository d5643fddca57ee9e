/**
 * Credentials (spec "Authentication"): `x-api-key` on signals and search, `Authorization: Bearer`
 * on the aggregator service. Failures are 401 (missing, unknown, revoked, expired, forged) or 403
 * (authenticated but not allowed), in the service's error shape.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { Request, RequestHandler, Response } from 'express';
import { findApiKey, type KeyService } from '../../lib/platform/api-keys.ts';
import type { PlatformContext } from '../../lib/context.ts';
import { domainsForAggregatorTypes } from '../../lib/network/config.ts';
import { TokenError, type AggregatorClaims } from '../../lib/platform/tokens.ts';
import { ReadCache } from '../../lib/platform/read-cache.ts';
import { HttpError } from './errors.ts';

/**
 * How long `apiKeyAuth` reuses a valid key's record read from the database: a revocation reaches
 * a process's requests within this window (a read begun longer ago is never used). It spares
 * every keyed request a query (docs/decisions.md, "Search at scale"); unknown or revoked keys are
 * never reused.
 */
export const API_KEY_CACHE_MS = 1000;

/** Whether `req` carries the platform's internal key (x-api-key; compared in constant time). */
export function isInternalKey(ctx: PlatformContext, req: Request): boolean {
  const digest = (value: string) => createHash('sha256').update(value).digest();
  return timingSafeEqual(digest(req.header('x-api-key') ?? ''), digest(ctx.internalApiKey));
}

/** Requires a valid, unrevoked API key of `service` (as read at most API_KEY_CACHE_MS ago); sets `res.locals.apiKey`. */
export function apiKeyAuth(ctx: PlatformContext, service: KeyService): RequestHandler {
  const keys = new ReadCache({ read: async (key) => (await findApiKey(ctx.pool, service, key)) ?? undefined, maxAgeMs: API_KEY_CACHE_MS, max: 10_000 });
  return async (req, res, next) => {
    const key = req.header('x-api-key');
    if (!key) throw new HttpError(401, 'Missing x-api-key header', { code: 'missing_api_key' });
    const found = await keys.get(key);
    if (!found) throw new HttpError(401, 'Unknown or revoked API key', { code: 'invalid_api_key' });
    res.locals.apiKey = found;
    next();
  };
}

/** The aggregator acting in a request, from a verified token and its registered record. */
export interface Caller {
  subject: string;
  aggregatorId: string;
  orgId: string;
  orgSlug: string;
  /** Aggregator types granted: those in the token that are also registered for the aggregator. */
  types: string[];
  /** Participant domains those types may onboard. */
  domains: Set<string>;
  roles: string[];
}

const bearerChallenge = (error?: string) => ({ 'WWW-Authenticate': error ? `Bearer realm="ldp", error="${error}"` : 'Bearer realm="ldp"' });

/**
 * How long `bearerAuth` reuses an aggregator's approved registration (status, organisation, types)
 * read from the database: a suspension or a change of types reaches a process's bearer requests
 * within this window (a read begun longer ago is never used). It spares a poller at hundreds of
 * requests a second one query per request (docs/decisions.md, "Voice campaigns"); refusals are
 * never reused.
 */
export const CALLER_CACHE_MS = 1000;
/** At most this many aggregators' registrations are remembered per process (the least recently used forgotten first). */
const CALLER_CACHE_MAX = 10_000;

/**
 * Requires a bearer token (RFC 6750) verified by `ctx.tokens` whose aggregator exists and is
 * approved (as read from the database at most CALLER_CACHE_MS ago); sets `res.locals.caller`.
 * Data scoping uses the caller, never ids from body or path. A token minted for one purpose (a
 * console sign-in link) is refused (401 invalid_token): `ctx.tokens.verify` takes bearer tokens only.
 */
export function bearerAuth(ctx: PlatformContext): RequestHandler {
  // Requests arriving while an aggregator's lookup is in flight share it: when the remembered
  // registration expires under hundreds of requests a second, one query replaces one per request,
  // which would otherwise take every pooled connection while PostgreSQL is busy.
  const registrations = new ReadCache<CallerRecord>({
    read: (aggregatorId) => lookupCaller(ctx, aggregatorId), maxAgeMs: CALLER_CACHE_MS, max: CALLER_CACHE_MAX,
    keep: (record) => record.status === 'approved' && record.org_status === 'approved',
  });
  return async (req, res, next) => {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(req.header('authorization') ?? '');
    if (!match) throw new HttpError(401, 'Missing bearer token in the Authorization header', { code: 'missing_token', headers: bearerChallenge() });
    let claims;
    try {
      claims = await ctx.tokens.verify(match[1]);
    } catch (err) {
      if (err instanceof TokenError) throw new HttpError(401, `Invalid bearer token: ${err.message}`, { code: 'invalid_token', headers: bearerChallenge('invalid_token') });
      throw err;
    }
    res.locals.caller = callerFrom(ctx, claims, await registrations.get(claims.aggregator_id), bearerChallenge('invalid_token'));
    next();
  };
}

/** An aggregator's registration as `resolveCaller` checks it. */
interface CallerRecord {
  org_id: string;
  types: string[];
  status: string;
  slug: string;
  org_status: string;
}

async function lookupCaller(ctx: PlatformContext, aggregatorId: string): Promise<CallerRecord | undefined> {
  // Named (prepared once per connection): it runs for most requests of the aggregator service.
  const { rows } = await ctx.pool.query<CallerRecord>({
    name: 'resolve-caller',
    text: `SELECT a.org_id, a.types, a.status, o.slug, o.status AS org_status
             FROM aggregator.aggregators a JOIN aggregator.organisations o USING (org_id)
            WHERE a.aggregator_id = $1`,
    values: [aggregatorId],
  });
  return rows[0];
}

function callerFrom(ctx: PlatformContext, claims: AggregatorClaims, record: CallerRecord | undefined, challenge: Record<string, string>): Caller {
  if (!record || record.org_id !== claims.org_id) {
    throw new HttpError(401, 'Bearer token names an unknown aggregator', { code: 'invalid_token', headers: challenge });
  }
  if (record.status !== 'approved' || record.org_status !== 'approved') {
    throw new HttpError(403, `Aggregator is ${record.status === 'approved' ? `in a ${record.org_status} organisation` : record.status}, not approved`, { code: 'aggregator_not_approved' });
  }
  const types = claims.aggregator_type.filter((t) => record.types.includes(t));
  return {
    subject: claims.sub, aggregatorId: claims.aggregator_id, orgId: record.org_id, orgSlug: record.slug,
    types, domains: domainsForAggregatorTypes(ctx.network, types), roles: claims.roles,
  };
}

/**
 * The caller named by verified aggregator `claims` (a bearer token's, or an operator console
 * session's), read from the database now: 401 when the aggregator is unknown, 403 when it or its
 * organisation is not approved.
 */
export async function resolveCaller(ctx: PlatformContext, claims: AggregatorClaims, challenge: Record<string, string> = {}): Promise<Caller> {
  return callerFrom(ctx, claims, await lookupCaller(ctx, claims.aggregator_id), challenge);
}

/** The caller set by `bearerAuth`. */
export function callerOf(res: Response): Caller {
  return res.locals.caller as Caller;
}

/** 403 unless the caller has one of `roles`. */
export function requireRole(...roles: string[]): RequestHandler {
  return (_req, res, next) => {
    const caller = callerOf(res);
    if (!caller.roles.some((r) => roles.includes(r))) {
      throw new HttpError(403, `This action needs one of the roles ${roles.join(', ')}`, { code: 'insufficient_role' });
    }
    next();
  };
}

/** 403 unless the caller's aggregator types allow onboarding `domain`. */
export function assertDomainAllowed(res: Response, domain: string): void {
  const caller = callerOf(res);
  if (!caller.domains.has(domain)) {
    throw new HttpError(403, `Aggregator type ${caller.types.join(', ') || '(none)'} may not onboard ${domain} participants`, { code: 'domain_not_allowed' });
  }
}
