/**
 * Schema-driven mutation fuzzing (issue 15): for every documented route of every service, fast-check
 * builds a valid request — path parameters, query, headers and body — from the route's own zod
 * schemas (as rendered into the service's OpenAPI document; test/helpers/schema-arbitraries.ts) or
 * from its documented example, then applies one mutation to one part: a key dropped, a value of
 * another type at any depth, a prototype key, a 1 MB string, a huge or non-finite number, a
 * look-alike string, a value wrapped in an array. A dropped key is a required one where the
 * schema has any. Path parameters name real resources (an item, a link, a saved mapping, an
 * upload, a voice job) most of the time, so handlers run past their lookups.
 *
 * Properties: never a 500 (503 only as a designed answer); every error of an API path is JSON in
 * the schema documented for that status, else in the route's error shape (the schema of its
 * documented 500); and a JSON body the documented schema refuses is never accepted (no 2xx).
 * Where test/platform/fuzz-routes.test.ts sends hostile values only, these requests are valid but
 * for one thing. A fixed seed and a modest run count in `npm test`; `npm run fuzz` runs many more
 * (FUZZ_RUNS, FUZZ_SEED).
 */
import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API_EXAMPLES } from '../../api/http/openapi.ts';
import type { ServiceName } from '../../api/http/service-app.ts';
import { createUpload } from '../helpers/bulk-upload.ts';
import { OpenApiChecker } from '../helpers/openapi-check.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';
import { arbitraryOf, jsonText, mutate, mutationArbitrary, requiredPathsOf, type Mutation } from '../helpers/schema-arbitraries.ts';

const RUNS = Number(process.env.FUZZ_RUNS ?? 12);
const SEED = Number(process.env.FUZZ_SEED ?? 1515);
const SERVICES: ServiceName[] = ['signals', 'search', 'aggregator'];
const METHODS = ['get', 'post', 'put', 'patch', 'delete'] as const;

let platform: TestPlatform;
const credentials: Record<ServiceName, Record<string, string>> = { signals: {}, search: {}, aggregator: {} };
const documents = new Map<ServiceName, Record<string, any>>();
/** Real path parameters by path template prefix (longest prefix wins). */
const realParams: Record<string, Record<string, string>> = {};

beforeAll(async () => {
  platform = await startTestPlatform();
  credentials.signals = { 'x-api-key': await platform.apiKey('signals') };
  credentials.search = { 'x-api-key': await platform.apiKey('search') };
  const agg = await platform.aggregator({ types: ['seeker', 'provider'] });
  credentials.aggregator = { authorization: `Bearer ${agg.token}` };
  for (const service of SERVICES) documents.set(service, (await request(platform.url(service)).get('/openapi.json').expect(200)).body);

  const itemId = randomUUID();
  await request(platform.url('signals')).put(`/api/v1/items/${itemId}`).set(credentials.signals).send(API_EXAMPLES.item as object).expect(201);
  realParams['/api/v1/items/{item_id}'] = { item_id: itemId };
  const aggregator = request(platform.url('aggregator'));
  const link = (await aggregator.post('/v1/links/create').set(credentials.aggregator).send(API_EXAMPLES.link as object).expect(201)).body;
  realParams['/v1/links/{id}'] = { id: link.link_id };
  realParams['/public/v1/aggregators/{orgSlug}/registrations/{slug}'] = { orgSlug: agg.orgSlug, slug: link.slug };
  realParams['/r/{orgSlug}/{slug}'] = { orgSlug: agg.orgSlug, slug: link.slug };
  const mapping = (await aggregator.post('/v1/bulk-uploads/mappings').set(credentials.aggregator).send(API_EXAMPLES.saved_mapping as object).expect(201)).body;
  realParams['/v1/bulk-uploads/mappings/{id}'] = { id: mapping.id };
  const upload = await createUpload(platform, agg.token, { participantType: 'seeker', file: Buffer.from('name,phone\r\nAsha Devi,9876543210\r\n'), filename: 'fuzz.csv' });
  realParams['/v1/bulk-uploads/{id}'] = { id: upload.body.upload_id };
  const voice = (await aggregator.post('/v1/campaign/voice').set(credentials.aggregator).set('idempotency-key', randomUUID()).send(API_EXAMPLES.voice_job as object)).body;
  if (voice.job_id) realParams['/v1/campaign/voice/{job_id}'] = { job_id: voice.job_id };
}, 120_000);
afterAll(() => platform?.stop());

interface Operation {
  method: typeof METHODS[number];
  template: string;
  op: Record<string, any>;
}

function operations(doc: Record<string, any>): Operation[] {
  return Object.entries<Record<string, any>>(doc.paths).flatMap(([template, item]) =>
    METHODS.filter((m) => item[m]).map((method) => ({ method, template, op: item[method] })));
}

type Part = 'path' | 'query' | 'headers' | 'body';
interface Input {
  path: Record<string, unknown>;
  query: Record<string, unknown>;
  headers: Record<string, unknown>;
  body: unknown;
}

/** Parameters of one place as a JSON Schema object (required where documented). */
function parameterObject(op: Record<string, any>, where: string): Record<string, any> {
  const declared = (op.parameters ?? []).filter((p: any) => p.in === where);
  return {
    type: 'object',
    properties: Object.fromEntries(declared.map((p: any) => [p.name, p.schema ?? {}])),
    required: declared.filter((p: any) => p.required).map((p: any) => p.name),
  };
}

/** A valid request of `op`: generated from its schemas, its body sometimes the documented example. */
function validInput(doc: Record<string, any>, { template, op }: Operation): fc.Arbitrary<Input> {
  const real = Object.entries(realParams).filter(([prefix]) => template.startsWith(prefix)).sort((a, b) => b[0].length - a[0].length)[0]?.[1];
  const generatedPath = arbitraryOf(parameterObject(op, 'path'), doc) as fc.Arbitrary<Record<string, unknown>>;
  const path = real ? fc.oneof({ weight: 4, arbitrary: generatedPath.map((p) => ({ ...p, ...real })) }, { weight: 1, arbitrary: generatedPath }) : generatedPath;
  const [contentType, content] = Object.entries<any>(op.requestBody?.content ?? {})[0] ?? [];
  let body: fc.Arbitrary<unknown> = fc.constant(undefined);
  if (content?.schema) {
    const generated = arbitraryOf(content.schema, doc);
    body = content.example !== undefined ? fc.oneof(generated, fc.constant(content.example)) : generated;
  }
  return fc.record({
    path,
    query: arbitraryOf(parameterObject(op, 'query'), doc) as fc.Arbitrary<Record<string, unknown>>,
    headers: arbitraryOf(parameterObject(op, 'header'), doc) as fc.Arbitrary<Record<string, unknown>>,
    body,
  }).map((input) => ({ ...input, contentType }));
}

const text = (v: unknown) => (typeof v === 'string' ? v : jsonText(v));
/** Header values as printable ASCII (what an HTTP client can send). */
const headerValue = (v: unknown) => text(v).replace(/[^\x20-\x7e]/g, '?').trim().slice(0, 4_000);

/**
 * An event stream (text/event-stream) never ends: its status and, for an error, its JSON body are
 * read, then the connection is closed.
 */
async function openStream(url: string, headers: Record<string, string>): Promise<{ status: number; headers: Record<string, string>; body: unknown; text: string }> {
  const abort = new AbortController();
  const res = await fetch(url, { headers, signal: abort.signal });
  const contentType = res.headers.get('content-type') ?? '';
  const text = res.status >= 300 ? await res.text() : '';
  abort.abort();
  return { status: res.status, headers: { 'content-type': contentType }, text, body: /json/.test(contentType) ? JSON.parse(text) : undefined };
}

async function send(service: ServiceName, { method, template, op }: Operation, input: Input & { contentType?: string }) {
  const stream = Boolean(op.responses?.['200']?.content?.['text/event-stream']);
  const path = template.replace(/\{(\w+)\}/g, (_m, name: string) => encodeURIComponent(text(input.path?.[name] ?? '')) || '%20');
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(input.query ?? {})) {
    if (Array.isArray(v)) v.forEach((x) => query.append(k, text(x)));
    else if (v && typeof v === 'object') Object.entries(v).forEach(([sub, x]) => query.append(`${k}[${sub}]`, text(x)));
    else if (v !== undefined) query.append(k, text(v));
  }
  const url = `${path}${query.size ? `?${query}` : ''}`;
  const headers = { ...Object.fromEntries(Object.entries(input.headers ?? {}).map(([k, v]) => [k, headerValue(v)])), ...credentials[service] };
  if (stream) return openStream(`${platform.url(service)}${url}`, headers);
  const req = request(platform.url(service))[method](url).set(headers).timeout(20_000);
  if (input.body === undefined && !input.contentType) return req;
  switch (input.contentType) {
    case 'multipart/form-data': {
      for (const [k, v] of Object.entries((input.body ?? {}) as Record<string, unknown>)) {
        if (k === 'file' && typeof v === 'string') req.attach('file', Buffer.from(v), 'fuzz.csv');
        else req.field(k, text(v));
      }
      return req;
    }
    case 'application/x-www-form-urlencoded': {
      const form = new URLSearchParams();
      for (const [k, v] of Object.entries((input.body ?? {}) as Record<string, unknown>)) form.append(k, text(v));
      return req.type('form').send(form.toString());
    }
    default:
      return req.type('application/json').send(input.body === undefined ? '' : jsonText(input.body));
  }
}

/** Pages (HTML) answer their own way; every API path answers JSON errors. */
const isApiPath = (path: string) => /^\/(v1|api|public)\//.test(path);

describe.each(SERVICES)('schema-driven fuzzing of every %s route', (service) => {
  it('a valid request but for one mutation: never a 500, errors in the documented shape, invalid bodies refused', async () => {
    const doc = documents.get(service)!;
    const checker = new OpenApiChecker(doc);
    const ops = operations(doc);
    expect(ops.length).toBeGreaterThan(3);
    for (const operation of ops) {
      const parts = (['path', 'query', 'headers', 'body'] as Part[]).filter((p) =>
        p === 'body' ? operation.op.requestBody : (operation.op.parameters ?? []).some((x: any) => x.in === (p === 'headers' ? 'header' : p)));
      if (!parts.length) continue;
      if (process.env.FUZZ_VERBOSE) console.error(`${operation.method.toUpperCase()} ${operation.template}`, new Date().toISOString());
      const bodyContent = operation.op.requestBody?.content?.['application/json'];
      await fc.assert(fc.asyncProperty(
        validInput(doc, operation), fc.constantFrom(...parts), mutationArbitrary,
        async (valid, part, mutation: Mutation) => {
          const schema = part === 'body' ? Object.values<any>(operation.op.requestBody.content)[0]?.schema
            : parameterObject(operation.op, part === 'headers' ? 'header' : part);
          const required = schema ? requiredPathsOf(schema, doc, valid[part]) : [];
          const input = { ...valid, [part]: mutate(valid[part], mutation, part === 'body' ? { required } : { hugeLength: 4_000, keepRoot: true, required }) };
          const res = await send(service, operation, input);
          if (process.env.FUZZ_VERBOSE) console.error(res.status, mutation.kind, part);
          const where = `${operation.method.toUpperCase()} ${operation.template} (${mutation.kind} in ${part}) → ${res.status} ${res.text?.slice(0, 300)}`;
          if (res.status !== 503) expect(res.status, where).toBeLessThan(500);
          if (res.status >= 400 && isApiPath(operation.template)) {
            expect(String(res.headers['content-type']), where).toMatch(/^application\/json/);
            const documented = operation.op.responses?.[String(res.status)]?.content?.['application/json']?.schema
              ?? operation.op.responses?.['500']?.content?.['application/json']?.schema;
            const validate = checker.validator(documented);
            expect(validate(res.body), `${where}: ${JSON.stringify(validate.errors?.slice(0, 3))}`).toBe(true);
          }
          if (part === 'body' && bodyContent?.schema && res.status < 300) {
            const sent = input.body === undefined ? undefined : JSON.parse(jsonText(input.body));
            const validate = checker.validator(bodyContent.schema);
            expect(validate(sent), `${where}: accepted a body its schema refuses: ${JSON.stringify(validate.errors?.slice(0, 3))}`).toBe(true);
          }
        },
      ), { seed: SEED, numRuns: RUNS, endOnFailure: true });
    }
  }, 60_000 + RUNS * 5_000);
});
