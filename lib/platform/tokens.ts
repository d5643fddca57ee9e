/**
 * Bearer tokens of the aggregator service (JWTs, verified with jose).
 *
 * Two issuers are accepted:
 * - the built-in issuer (JWT_ISSUER), whose signing key is JWT_PRIVATE_KEY (a JWK, or a PKCS#8 PEM
 *   for ES256) or an ES256 key generated on first start into `<DATA_DIR>/keys/jwt-signing-key.jwk`;
 *   `ldp token` mints its tokens;
 * - optionally an external OIDC issuer (OIDC_ISSUER with its JWKS at OIDC_JWKS_URL).
 *
 * Verification pins issuer, audience and an algorithm allow-list and checks exp/nbf (RFC 7519 §4.1),
 * so `alg: none`, forged, expired and foreign tokens all fail.
 *
 * One use per token (docs/decisions.md, "One use per token; roles in the console"): a token minted
 * for a purpose (`issueForPurpose`, e.g. the console sign-in link) carries a `purpose` claim and
 * its own audience (`<JWT_AUDIENCE>:<purpose>`); `verifyPurpose` accepts only such a token of that
 * purpose, and `verify`/`verifyAny` (every bearer route) refuse any token with a `purpose`.
 *
 * A verified token is remembered, keyed by its exact text, for at most VERIFIED_TOKEN_TTL_MS and
 * never past its `exp`: a poller sending the same token hundreds of times a second pays for one
 * ECDSA/RSA verification, not one per request (docs/decisions.md, "Voice campaigns").
 */
import { randomUUID } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import {
  createLocalJWKSet, createRemoteJWKSet, decodeJwt, exportJWK, generateKeyPair, importJWK, importPKCS8,
  jwtVerify, SignJWT, type JSONWebKeySet, type JWK, type JWTVerifyGetKey,
} from 'jose';
import { z } from 'zod';
import type { Config } from './config.ts';
import { readOrCreateSecret } from './secrets.ts';

/** Claims an aggregator token carries, besides the registered ones. */
export const aggregatorClaimsSchema = z.object({
  sub: z.string().min(1),
  aggregator_id: z.uuid(),
  org_id: z.uuid(),
  /** The network's aggregator types: which participant domains the caller may onboard. */
  aggregator_type: z.array(z.string().min(1)),
  roles: z.array(z.string().min(1)),
});

export type AggregatorClaims = z.infer<typeof aggregatorClaimsSchema>;

/** A verified token of any identity: a person's (user) token, or an aggregator's. */
export interface VerifiedToken {
  /** The subject (`sub`): the user id for the built-in issuer's user tokens, the OIDC subject otherwise. */
  sub: string;
  /** The issuer that signed it (JWT_ISSUER or OIDC_ISSUER). */
  issuer: string;
  /** Every claim of the token, as verified. */
  payload: Record<string, unknown>;
  /** The aggregator claims, when the token carries them (an aggregator's token). */
  aggregator?: AggregatorClaims;
}

/** Roles, from most to least privileged. */
export const ROLES = ['admin', 'operator', 'viewer'] as const;

/** How long a verified token is remembered (never past its exp): bounds how long a key removed from an OIDC JWKS still verifies. */
export const VERIFIED_TOKEN_TTL_MS = 60_000;
/** At most this many verified tokens are remembered (the least recently used are forgotten first). */
const VERIFIED_TOKENS_MAX = 10_000;

export class TokenError extends Error {
  name = 'TokenError';
}

export interface TokenService {
  /** Signs a token with the built-in issuer, valid for `ttlSeconds`. */
  issue(claims: AggregatorClaims, ttlSeconds: number): Promise<string>;
  /**
   * Signs a person's (user) token with the built-in issuer: subject `sub` (a user id), no aggregator
   * claims, valid for `ttlSeconds`; `extra` claims (e.g. `email`) are added as they are.
   */
  issueUser(sub: string, ttlSeconds: number, extra?: Record<string, unknown>): Promise<string>;
  /**
   * Signs a token of the built-in issuer for one `purpose` only (e.g. `console-login`): subject
   * `sub`, the `claims` as they are plus `purpose`, audience `<JWT_AUDIENCE>:<purpose>`, valid for
   * `ttlSeconds`. Only `verifyPurpose(token, purpose)` accepts it; no bearer route does.
   */
  issueForPurpose(purpose: string, sub: string, ttlSeconds: number, claims?: Record<string, unknown>): Promise<string>;
  /** Verifies an aggregator's `token` and returns its claims. @throws TokenError (any failure: caller answers 401). */
  verify(token: string): Promise<AggregatorClaims>;
  /**
   * Verifies a token of any identity (user or aggregator; built-in issuer or OIDC): signature,
   * issuer, audience, algorithm allow-list, exp/nbf, `sub`.
   * @throws TokenError (any failure: caller answers 401).
   */
  verifyAny(token: string): Promise<VerifiedToken>;
  /**
   * Verifies a token minted by `issueForPurpose` for `purpose`: built-in issuer only, its purpose
   * audience, the same `purpose` claim, exp/nbf, `sub`. Not cached (such tokens are used once).
   * @throws TokenError (any failure, a bearer token included).
   */
  verifyPurpose(token: string, purpose: string): Promise<VerifiedToken>;
  /** Public keys of the built-in issuer (served at /.well-known/jwks.json). */
  jwks(): JSONWebKeySet;
}

function deepFreeze<T>(value: T): T {
  if (value && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const inner of Object.values(value)) deepFreeze(inner);
  }
  return value;
}

async function builtInKey(config: Config): Promise<JWK> {
  if (config.JWT_PRIVATE_KEY?.trim().startsWith('{')) return JSON.parse(config.JWT_PRIVATE_KEY) as JWK;
  if (config.JWT_PRIVATE_KEY) {
    const key = await importPKCS8(config.JWT_PRIVATE_KEY, 'ES256', { extractable: true });
    return { ...(await exportJWK(key)), alg: 'ES256', kid: 'configured' };
  }
  const text = await readOrCreateSecret(config.dataDirPath, 'jwt-signing-key.jwk', async () => {
    const { privateKey } = await generateKeyPair('ES256', { extractable: true });
    return JSON.stringify({ ...(await exportJWK(privateKey)), alg: 'ES256', kid: randomUUID() });
  });
  return JSON.parse(text) as JWK;
}

/** Sets up signing and verification from the configuration. @throws Error on an unusable key. */
export async function createTokenService(config: Config): Promise<TokenService> {
  const privateJwk = await builtInKey(config);
  const alg = privateJwk.alg ?? 'ES256';
  const signingKey = await importJWK(privateJwk, alg);
  const { d: _d, p: _p, q: _q, dp: _dp, dq: _dq, qi: _qi, ...publicJwk } = privateJwk;
  const jwks: JSONWebKeySet = { keys: [{ ...publicJwk, alg, use: 'sig' }] };
  const localKeys = createLocalJWKSet(jwks);
  const oidc = config.OIDC_ISSUER && config.OIDC_JWKS_URL
    ? { issuer: config.OIDC_ISSUER, keys: createRemoteJWKSet(new URL(config.OIDC_JWKS_URL)), algorithms: config.OIDC_ALGORITHMS.split(',') }
    : undefined;

  const purposeAudience = (purpose: string) => `${config.JWT_AUDIENCE}:${purpose}`;
  const sign = (sub: string, claims: Record<string, unknown>, ttlSeconds: number, audience = config.JWT_AUDIENCE) => new SignJWT(claims)
    .setProtectedHeader({ alg, kid: privateJwk.kid, typ: 'JWT' })
    .setIssuer(config.JWT_ISSUER)
    .setAudience(audience)
    .setSubject(sub)
    .setIssuedAt()
    .setNotBefore('0s')
    .setExpirationTime(`${ttlSeconds}s`)
    .setJti(randomUUID())
    .sign(signingKey);

  // Least recently used forgotten first; each entry lives until its token's exp, at most the TTL.
  const verified = new LRUCache<string, VerifiedToken>({ max: VERIFIED_TOKENS_MAX });
  const verifyAny = async (token: string): Promise<VerifiedToken> => {
    const known = verified.get(token);
    if (known) return known;
    const result = await verifyUncached(token);
    const ttl = Math.min((result.payload.exp as number) * 1000 - Date.now(), VERIFIED_TOKEN_TTL_MS);
    // Shared by every request that sends this token: frozen, so none can change what another sees.
    if (ttl > 0) verified.set(token, deepFreeze(result), { ttl });
    return result;
  };

  /** Verifies `token` as a bearer token (no `purpose`) or, given `purpose`, as a token of that purpose only. */
  const verifyUncached = async (token: string, purpose?: string): Promise<VerifiedToken> => {
    let claims;
    try {
      claims = decodeJwt(token);
    } catch {
      throw new TokenError('malformed bearer token');
    }
    // Refusing on the unverified claim is safe; the claims verified below are these same bytes.
    if (claims.purpose !== purpose) {
      throw new TokenError(purpose ? `not a ${purpose} token` : `a single-use ${String(claims.purpose)} token is not a bearer token`);
    }
    const { iss: issuer } = claims;
    const verifier: { keys: JWTVerifyGetKey; issuer: string; audience: string; algorithms: string[] } | undefined =
      purpose ? (issuer === config.JWT_ISSUER ? { keys: localKeys, issuer, audience: purposeAudience(purpose), algorithms: [alg] } : undefined)
        : issuer === config.JWT_ISSUER ? { keys: localKeys, issuer: config.JWT_ISSUER, audience: config.JWT_AUDIENCE, algorithms: [alg] }
          : oidc && issuer === oidc.issuer ? { ...oidc, audience: config.OIDC_AUDIENCE ?? config.JWT_AUDIENCE }
            : undefined;
    if (!verifier) throw new TokenError('token issuer is not trusted');
    let payload: unknown;
    try {
      ({ payload } = await jwtVerify(token, verifier.keys, {
        issuer: verifier.issuer, audience: verifier.audience, algorithms: verifier.algorithms, requiredClaims: ['exp', 'sub'],
      }));
    } catch (err) {
      const code = (err as { code?: string }).code;
      throw new TokenError(code === 'ERR_JWT_EXPIRED' ? 'token has expired' : 'token signature or claims are invalid');
    }
    const record = payload as Record<string, unknown>;
    const aggregator = aggregatorClaimsSchema.safeParse(payload);
    return { sub: record.sub as string, issuer: verifier.issuer, payload: record, ...(aggregator.success ? { aggregator: aggregator.data } : {}) };
  };

  return {
    async issue(claims, ttlSeconds) {
      const { sub, ...rest } = aggregatorClaimsSchema.parse(claims);
      return sign(sub, rest, ttlSeconds);
    },
    async issueUser(sub, ttlSeconds, extra = {}) {
      if ('purpose' in extra) throw new Error('issueUser: a token with a purpose is minted by issueForPurpose');
      return sign(sub, extra, ttlSeconds);
    },
    issueForPurpose: (purpose, sub, ttlSeconds, claims = {}) => sign(sub, { ...claims, purpose }, ttlSeconds, purposeAudience(purpose)),
    verifyAny,
    verifyPurpose: (token, purpose) => verifyUncached(token, purpose),
    async verify(token) {
      const { aggregator } = await verifyAny(token);
      if (!aggregator) throw new TokenError('token lacks the aggregator claims (aggregator_id, org_id, aggregator_type, roles)');
      return aggregator;
    },
    jwks: () => jwks,
  };
}
