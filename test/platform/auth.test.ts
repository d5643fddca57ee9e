import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { exportJWK, generateKeyPair, importJWK, SignJWT, type JWK } from 'jose';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API_KEY_CACHE_MS } from '../../api/http/auth.ts';
import { createApiKey, revokeApiKey } from '../../lib/platform/api-keys.ts';
import { startTestPlatform, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';
import { until } from '../helpers/until.ts';

type PrivateKey = Awaited<ReturnType<typeof generateKeyPair>>['privateKey'];

let platform: TestPlatform;
let agg: TestAggregator;
let oidc: { server: http.Server; url: string; privateKey: PrivateKey };
const OIDC_ISSUER = 'https://id.example.test/realms/ldp';

const shapeC = (code: string) => ({
  error: { code, title: expect.any(String), detail: expect.any(String), requestId: expect.any(String), timestamp: expect.any(String) },
});

beforeAll(async () => {
  // A real external OIDC issuer as far as we are concerned: its JWKS served over HTTP.
  const { publicKey, privateKey } = await generateKeyPair('RS256');
  const jwks = { keys: [{ ...(await exportJWK(publicKey)), kid: 'oidc-1', alg: 'RS256', use: 'sig' }] };
  const server = http.createServer((_req, res) => res.setHeader('content-type', 'application/json').end(JSON.stringify(jwks)));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  oidc = { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/jwks`, privateKey };
  platform = await startTestPlatform({ env: { OIDC_ISSUER, OIDC_JWKS_URL: oidc.url } });
  agg = await platform.aggregator({ types: ['provider'] });
});
afterAll(async () => {
  await platform.stop();
  oidc.server.close();
});

describe.each([
  ['signals', '/api/v1/items/00000000-0000-4000-8000-000000000000'],
  ['search', '/v1/search'],
] as const)('%s service API keys', (service, probe) => {
  it('answers 401 in shape A for a missing, unknown or revoked key, and lets a valid key through', async () => {
    const base = platform.url(service);
    const missing = await request(base).get(probe);
    expect(missing.status).toBe(401);
    expect(missing.body).toEqual({ error: 'missing_api_key', message: 'Missing x-api-key header' });

    const unknown = await request(base).get(probe).set('x-api-key', `ldp_${service}_not-a-key`);
    expect(unknown.status).toBe(401);
    expect(unknown.body).toEqual({ error: 'invalid_api_key', message: 'Unknown or revoked API key' });

    const { keyId, key } = await createApiKey(platform.ctx.pool, service, 'auth test');
    expect((await request(base).get(probe).set('x-api-key', key)).status).not.toBe(401);
    expect(await revokeApiKey(platform.ctx.pool, service, keyId)).toBe(true);
    // A key's record read for a request is reused for at most API_KEY_CACHE_MS.
    await new Promise((resolve) => setTimeout(resolve, API_KEY_CACHE_MS));
    const revoked = await request(base).get(probe).set('x-api-key', key);
    expect(revoked.status).toBe(401);
    expect(revoked.body.error).toBe('invalid_api_key');
  });

  it('does not accept a key of the other service', async () => {
    const other = service === 'signals' ? 'search' : 'signals';
    const res = await request(platform.url(service)).get(probe).set('x-api-key', await platform.apiKey(other));
    expect(res.status).toBe(401);
  });
});

describe('aggregator bearer tokens', () => {
  const me = () => request(platform.url('aggregator')).get('/v1/me');
  async function builtInKey() {
    const jwk = JSON.parse(await readFile(path.join(platform.dataDir, 'keys', 'jwt-signing-key.jwk'), 'utf8')) as JWK;
    return { jwk, key: await importJWK(jwk, 'ES256') };
  }
  const claims = () => ({ aggregator_id: agg.aggregatorId, org_id: agg.orgId, aggregator_type: ['provider'], roles: ['admin'] });
  async function sign(over: { iss?: string; aud?: string; exp?: number; nbf?: number; payload?: object; key?: PrivateKey | Uint8Array; alg?: string; kid?: string } = {}) {
    const { jwk, key } = await builtInKey();
    const now = Math.floor(Date.now() / 1000);
    return new SignJWT({ ...claims(), ...over.payload })
      .setProtectedHeader({ alg: over.alg ?? 'ES256', kid: over.kid ?? jwk.kid })
      .setIssuer(over.iss ?? platform.config.JWT_ISSUER)
      .setAudience(over.aud ?? platform.config.JWT_AUDIENCE)
      .setSubject(`aggregator:${agg.aggregatorId}`)
      .setIssuedAt()
      .setNotBefore(over.nbf ?? now - 5)
      .setExpirationTime(over.exp ?? now + 600)
      .sign(over.key ?? key);
  }

  it('accepts a valid token and reports the caller from the verified claims and the registered aggregator', async () => {
    const res = await me().set('authorization', `Bearer ${agg.token}`);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      aggregator_id: agg.aggregatorId, org_id: agg.orgId, org_slug: agg.orgSlug, aggregator_type: ['provider'], domains: ['provider'], roles: ['admin'],
    });
    expect(res.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('answers 401 in shape C with a Bearer challenge when the token is missing or not a bearer token', async () => {
    for (const header of [undefined, 'Basic dXNlcjpwYXNz', 'Bearer', 'Bearer a b']) {
      const req = me();
      if (header) req.set('authorization', header);
      const res = await req;
      expect(res.status).toBe(401);
      expect(res.body).toEqual(shapeC('missing_token'));
      expect(res.headers['www-authenticate']).toBe('Bearer realm="ldp"');
    }
  });

  it.each([
    ['expired', () => sign({ exp: Math.floor(Date.now() / 1000) - 60 }), /expired/],
    ['not yet valid (nbf)', () => sign({ nbf: Math.floor(Date.now() / 1000) + 3600 }), /invalid/],
    ['for another audience', () => sign({ aud: 'someone-else' }), /invalid/],
    ['from an untrusted issuer', () => sign({ iss: 'https://evil.example' }), /not trusted/],
    ['forged (signed with another key)', async () => sign({ key: (await generateKeyPair('ES256')).privateKey }), /invalid/],
    ['signed with HS256 using the public key as secret', async () => {
      const { jwk } = await builtInKey();
      return sign({ alg: 'HS256', key: new TextEncoder().encode(JSON.stringify({ kty: jwk.kty, crv: jwk.crv, x: jwk.x, y: jwk.y })) });
    }, /invalid/],
    ['unsigned (alg: none)', async () => {
      const enc = (o: object) => Buffer.from(JSON.stringify(o)).toString('base64url');
      const now = Math.floor(Date.now() / 1000);
      return `${enc({ alg: 'none', typ: 'JWT' })}.${enc({ ...claims(), iss: platform.config.JWT_ISSUER, aud: platform.config.JWT_AUDIENCE, sub: 'x', exp: now + 600 })}.`;
    }, /invalid/],
    ['garbage', async () => 'not.a.jwt', /malformed/],
    ['with a tampered payload (roles raised after signing)', async () => {
      const [header, payload, signature] = (await sign({ payload: { roles: ['viewer'] } })).split('.');
      const raised = { ...JSON.parse(Buffer.from(payload, 'base64url').toString()), roles: ['admin'] };
      return `${header}.${Buffer.from(JSON.stringify(raised)).toString('base64url')}.${signature}`;
    }, /invalid/],
    ['naming an unknown key id (kid)', () => sign({ kid: 'no-such-key' }), /invalid/],
    ['without the aggregator claims', () => sign({ payload: { aggregator_id: undefined, roles: undefined } }), /lacks the aggregator claims/],
    ['naming an unknown aggregator', () => sign({ payload: { aggregator_id: randomUUID() } }), /unknown aggregator/],
    ['naming another organisation', () => sign({ payload: { org_id: randomUUID() } }), /unknown aggregator/],
  ])('rejects a token %s with 401 in shape C', async (_what, make, detail) => {
    const res = await me().set('authorization', `Bearer ${await make()}`);
    expect(res.status).toBe(401);
    expect(res.body).toEqual(shapeC('invalid_token'));
    expect(res.body.error.detail).toMatch(detail);
    expect(res.headers['www-authenticate']).toBe('Bearer realm="ldp", error="invalid_token"');
  });

  it('answers 403 in shape C when the aggregator or its organisation is not approved', async () => {
    const other = await platform.aggregator();
    await platform.ctx.pool.query(`UPDATE aggregator.aggregators SET status = 'suspended' WHERE aggregator_id = $1`, [other.aggregatorId]);
    const res = await me().set('authorization', `Bearer ${other.token}`);
    expect(res.status).toBe(403);
    expect(res.body).toEqual(shapeC('aggregator_not_approved'));

    const third = await platform.aggregator();
    await platform.ctx.pool.query(`UPDATE aggregator.organisations SET status = 'pending' WHERE org_id = $1`, [third.orgId]);
    expect((await me().set('authorization', `Bearer ${third.token}`)).status).toBe(403);
  });

  it('stops accepting a token at its expiry however often it was verified before (verified tokens are remembered only until exp)', async () => {
    const token = await sign({ exp: Math.floor(Date.now() / 1000) + 2 });
    expect((await me().set('authorization', `Bearer ${token}`)).status).toBe(200);
    const expired = await until('the token to expire', async () => {
      const res = await me().set('authorization', `Bearer ${token}`);
      return res.status !== 200 && res;
    }, 15_000);
    expect(expired.status).toBe(401);
    expect(expired.body.error.detail).toMatch(/expired/);
  });

  it('answers 403 once the aggregator is suspended, though its approval was read for the request before (re-read within CALLER_CACHE_MS)', async () => {
    const other = await platform.aggregator();
    expect((await me().set('authorization', `Bearer ${other.token}`)).status).toBe(200);
    await platform.ctx.pool.query(`UPDATE aggregator.aggregators SET status = 'suspended' WHERE aggregator_id = $1`, [other.aggregatorId]);
    const refused = await until('the suspension to be seen', async () => {
      const res = await me().set('authorization', `Bearer ${other.token}`);
      return res.status !== 200 && res;
    }, 15_000);
    expect(refused.status).toBe(403);
    expect(refused.body).toEqual(shapeC('aggregator_not_approved'));
  });

  it('grants only the aggregator types both the token and the registration carry', async () => {
    const token = await sign({ payload: { aggregator_type: ['provider', 'seeker'] } });
    const res = await me().set('authorization', `Bearer ${token}`);
    expect(res.body.aggregator_type).toEqual(['provider']);
    expect(res.body.domains).toEqual(['provider']);
  });

  it('accepts tokens of a configured external OIDC issuer, verified against its JWKS, and rejects forgeries of it', async () => {
    const oidcToken = (key: PrivateKey) => new SignJWT(claims())
      .setProtectedHeader({ alg: 'RS256', kid: 'oidc-1' })
      .setIssuer(OIDC_ISSUER).setAudience(platform.config.JWT_AUDIENCE).setSubject('user-42')
      .setIssuedAt().setExpirationTime('10m').sign(key);
    const ok = await me().set('authorization', `Bearer ${await oidcToken(oidc.privateKey)}`);
    expect(ok.status).toBe(200);
    expect(ok.body.aggregator_id).toBe(agg.aggregatorId);
    const forged = await me().set('authorization', `Bearer ${await oidcToken((await generateKeyPair('RS256')).privateKey)}`);
    expect(forged.status).toBe(401);
  });
});

describe('user (non-aggregator) tokens of the built-in issuer', () => {
  it('verify any identity, carry no aggregator claims and are refused by aggregator routes', async () => {
    const token = await platform.ctx.tokens.issueUser('user-7', 600, { email: 'asha@example.test' });
    const verified = await platform.ctx.tokens.verifyAny(token);
    expect(verified).toMatchObject({ sub: 'user-7', issuer: platform.config.JWT_ISSUER, payload: { email: 'asha@example.test' } });
    expect(verified.aggregator).toBeUndefined();
    const res = await request(platform.url('aggregator')).get('/v1/bulk-uploads').set('authorization', `Bearer ${token}`);
    expect(res.status).toBe(401);
    expect(res.body.error.detail).toMatch(/lacks the aggregator claims/);
    await expect(platform.ctx.tokens.verifyAny(`${token}x`)).rejects.toThrow(/invalid/);

    const aggregatorToken = await platform.ctx.tokens.verifyAny(agg.token);
    expect(aggregatorToken.aggregator?.aggregator_id).toBe(agg.aggregatorId);
  });
});
