/**
 * Every mounted route of every service, fed hostile bodies, queries, path parameters and headers
 * by fast-check: never a 500 (503 only as a designed answer), and every error answer of an API path
 * is in the service's error shape (spec "Errors": A on search and signals, B on signup, C on the aggregator — whose public registration
 * may answer its own `outcome` body). Routes are read from the running apps, so new routes are
 * fuzzed without being listed here. A fixed seed and a modest run count per route in `npm test`;
 * `npm run fuzz` runs many more (FUZZ_RUNS, FUZZ_SEED).
 */
import fc from 'fast-check';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ServiceName } from '../../api/http/service-app.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';
import { appOf, mountedRoutes, type MountedRoute } from '../helpers/routes.ts';

const RUNS = Number(process.env.FUZZ_RUNS ?? 8);
const SEED = Number(process.env.FUZZ_SEED ?? 4242);

let platform: TestPlatform;
const credentials: Record<ServiceName, Record<string, string>> = { signals: {}, search: {}, aggregator: {} };

beforeAll(async () => {
  platform = await startTestPlatform();
  credentials.signals = { 'x-api-key': await platform.apiKey('signals') };
  credentials.search = { 'x-api-key': await platform.apiKey('search') };
  credentials.aggregator = { authorization: `Bearer ${(await platform.aggregator()).token}` };
});
afterAll(() => platform.stop());

const PROTOTYPE_KEYS = ['__proto__', 'constructor', 'prototype', 'toString', 'valueOf', 'hasOwnProperty', 'toString.1', 'constructor.prototype'];
const hostileString = fc.oneof(
  { weight: 4, arbitrary: fc.string({ maxLength: 40 }) },
  { weight: 2, arbitrary: fc.string({ unit: 'grapheme', maxLength: 20 }) },
  {
    weight: 3,
    arbitrary: fc.constantFrom(
      ...PROTOTYPE_KEYS, '', ' ', '\u0000', 'ｓｃｈｏｏｌ', 'ѕсhооl', '\u202eevil', '%00', '../../etc/passwd', "'; DROP TABLE x;--",
      '=HYPERLINK("x")', 'NaN', 'Infinity', '-0', '1e309', '9'.repeat(400), 'true', 'null', '[]', '{}', '00000000-0000-0000-0000-000000000000',
      '2026-13-45T99:99:99Z', '+919876543210', 'a@b', 'x'.repeat(5000),
    ),
  },
  { weight: 1, arbitrary: fc.constant('x'.repeat(1_048_576)) },
);
const hostileNumber = fc.oneof(fc.integer(), fc.double(), fc.constantFrom(1e308, -1e308, 2 ** 53 + 2, -0, 0.30000000000000004, 1e-320));
const hostileKey = fc.oneof(fc.string({ maxLength: 12 }), fc.constantFrom(...PROTOTYPE_KEYS));
const { value: hostileJson } = fc.letrec<{ value: unknown }>((tie) => ({
  value: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    hostileString, hostileNumber, fc.boolean(), fc.constant(null),
    fc.array(tie('value'), { maxLength: 4 }),
    fc.dictionary(hostileKey, tie('value'), { maxKeys: 5 }),
  ),
}));
/** A raw request body: JSON of a hostile value, deep nesting, or not JSON at all. */
const hostileBody = fc.oneof(
  { weight: 6, arbitrary: hostileJson.map((v) => JSON.stringify(v) ?? 'null') },
  { weight: 1, arbitrary: fc.integer({ min: 1_000, max: 100_000 }).map((n) => `${'['.repeat(n)}${']'.repeat(n)}`) },
  { weight: 1, arbitrary: fc.integer({ min: 1_000, max: 20_000 }).map((n) => `${'{"a":'.repeat(n)}1${'}'.repeat(n)}`) },
  { weight: 1, arbitrary: fc.constantFrom('{', '{"a":}', '\u0000', '', 'null', '[1,2', '{"__proto__":{"admin":true}}', '{"constructor":{"prototype":{"x":1}}}') },
);
const QUERY_KEYS = ['limit', 'offset', 'page', 'after', 'cursor', 'domain', 'status', 'lifecycle', 'refresh', 'format', 'participant_type', 'items_limit', 'q', 'intent', 'token'];
const hostileQuery = fc.dictionary(fc.oneof(fc.constantFrom(...QUERY_KEYS), hostileKey), fc.oneof(hostileString.filter((s) => s.length < 10_000), fc.array(fc.string({ maxLength: 8 }), { minLength: 2, maxLength: 3 })), { maxKeys: 4 });
const printable = fc.string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)), maxLength: 60 });
const hostileHeaders = fc.record({
  'content-type': fc.constantFrom('application/json', 'application/json', 'application/json; charset=utf-8', 'text/plain', 'application/json; charset=utf-16', 'multipart/form-data; boundary=xyz', 'application/x-www-form-urlencoded'),
  'x-acting-org-id': printable, 'idempotency-key': printable, 'if-none-match': printable, 'x-request-id': printable,
}, { requiredKeys: ['content-type'] });
const pathParam = fc.oneof(fc.uuid(), hostileString.filter((s) => s.length > 0 && s.length < 2000));

/** Whether a JSON error body is in one of `shapes` (spec "Errors"). */
function inShape(body: unknown, shapes: Array<'A' | 'B' | 'C' | 'outcome'>): boolean {
  const b = body as Record<string, any> | null;
  if (!b || typeof b !== 'object') return false;
  const str = (v: unknown) => typeof v === 'string';
  return shapes.some((shape) => {
    switch (shape) {
      case 'A': return str(b.error) && str(b.message);
      case 'B': return str(b.code) && str(b.error) && str(b.message);
      case 'C': return typeof b.error === 'object' && b.error !== null && ['code', 'title', 'detail', 'requestId', 'timestamp'].every((k) => str(b.error[k]));
      case 'outcome': return str(b.outcome);
    }
  });
}

const SHAPES: Record<ServiceName, Array<'A' | 'B' | 'C' | 'outcome'>> = { signals: ['A', 'B'], search: ['A'], aggregator: ['C', 'outcome'] };
/** Pages (HTML) answer their own way; every API path answers JSON errors. */
const isApiPath = (path: string) => /^\/(v1|api|public)\//.test(path);

describe.each(['signals', 'search', 'aggregator'] as ServiceName[])('fuzzing every %s route', (service) => {
  it('never answers 500, and answers 4xx in the service’s error shape', async () => {
    const routes = mountedRoutes(appOf(platform.services.find((s) => s.name === service)!.server));
    expect(routes.length).toBeGreaterThan(0);
    for (const route of routes) {
      await fc.assert(fc.asyncProperty(
        fc.array(pathParam, { minLength: 4, maxLength: 4 }), hostileQuery, hostileBody, hostileHeaders,
        async (params, query, body, headers) => {
          const res = await send(service, route, params, query, body, headers);
          const where = `${route.method} ${route.path} → ${res.status} ${res.text.slice(0, 300)}`;
          // 503 is a designed answer (/ready without a worker; a dashboard still being computed);
          // any other 5xx is a crash.
          if (res.status !== 503) expect(res.status, where).toBeLessThan(500);
          if (res.status >= 400 && isApiPath(route.path)) {
            expect(res.headers['content-type'], where).toMatch(/^application\/json/);
            expect(inShape(res.body, SHAPES[service]), where).toBe(true);
          }
        },
      ), { seed: SEED, numRuns: RUNS, endOnFailure: true });
    }
  }, 300_000);
});

function send(service: ServiceName, route: MountedRoute, params: string[], query: Record<string, unknown>, body: string, headers: Record<string, string>) {
  let i = 0;
  const path = route.path.replace(/:(\w+)/g, () => encodeURIComponent(params[i++ % params.length]));
  const req = request(platform.url(service))[route.method.toLowerCase() as 'get' | 'post' | 'put' | 'patch' | 'delete'](path)
    .set(credentials[service]).set(headers).query(query as Record<string, string>);
  return ['GET', 'HEAD', 'DELETE'].includes(route.method) ? req : req.send(body);
}
