import { Writable } from 'node:stream';
import { pino } from 'pino';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { errorBody, HttpError } from '../../api/http/errors.ts';
import { startTestPlatform, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';

let platform: TestPlatform;
let signalsKey: string;
let searchKey: string;
let agg: TestAggregator;
const logLines: Record<string, any>[] = [];

beforeAll(async () => {
  const sink = new Writable({ write(chunk, _enc, done) { logLines.push(JSON.parse(String(chunk))); done(); } });
  platform = await startTestPlatform({ env: { HTTP_BODY_LIMIT: '2kb' }, logger: pino({ level: 'error' }, sink) });
  signalsKey = await platform.apiKey('signals');
  searchKey = await platform.apiKey('search');
  agg = await platform.aggregator();
});
afterAll(() => platform.stop());

const shapeC = (code: string) => ({
  error: { code, title: expect.any(String), detail: expect.any(String), requestId: expect.any(String), timestamp: expect.any(String) },
});

describe('error shapes and HTTP edge cases', () => {
  it('answers an unknown route with 404 in each service\'s shape', async () => {
    const signals = await request(platform.url('signals')).get('/api/v1/nope').set('x-api-key', signalsKey);
    expect(signals.status).toBe(404);
    expect(signals.body).toEqual({ error: 'not_found', message: 'No route for GET /api/v1/nope' });
    const search = await request(platform.url('search')).post('/v1/nope').set('x-api-key', searchKey).send({});
    expect(search.status).toBe(404);
    expect(search.body).toEqual({ error: 'not_found', message: 'No route for POST /v1/nope' });
    const aggregator = await request(platform.url('aggregator')).get('/v1/nope').set('authorization', `Bearer ${agg.token}`);
    expect(aggregator.status).toBe(404);
    expect(aggregator.body).toEqual(shapeC('not_found'));
    const outside = await request(platform.url('aggregator')).get('/nothing-here');
    expect(outside.status).toBe(404);
    expect(outside.body).toEqual(shapeC('not_found'));
  });

  it('answers malformed JSON with 400 invalid_json', async () => {
    const signals = await request(platform.url('signals')).post('/api/v1/items/batch').set('x-api-key', signalsKey)
      .set('content-type', 'application/json').send('{"items": [');
    expect(signals.status).toBe(400);
    expect(signals.body).toEqual({ error: 'invalid_json', message: 'Request body is not valid JSON' });
    const aggregator = await request(platform.url('aggregator')).post('/v1/me').set('authorization', `Bearer ${agg.token}`)
      .set('content-type', 'application/json').send('nope');
    expect(aggregator.status).toBe(400);
    expect(aggregator.body).toEqual(shapeC('invalid_json'));
  });

  it('answers a body over HTTP_BODY_LIMIT with 413 and a wrong content type with 415', async () => {
    const big = await request(platform.url('signals')).post('/api/v1/items/batch').set('x-api-key', signalsKey)
      .send({ items: ['x'.repeat(4096)] });
    expect(big.status).toBe(413);
    expect(big.body).toEqual({ error: 'payload_too_large', message: 'Request body exceeds the limit of 2000 bytes' });
    const text = await request(platform.url('signals')).post('/api/v1/items/batch').set('x-api-key', signalsKey)
      .set('content-type', 'text/plain').send('items');
    expect(text.status).toBe(415);
    expect(text.body.error).toBe('unsupported_media_type');
  });

  it('answers invalid bodies with 400 naming each field (shape A on signals)', async () => {
    const res = await request(platform.url('signals')).post('/api/v1/items/batch').set('x-api-key', signalsKey).send({ items: [] });
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('invalid_request');
    expect(res.body.message).toMatch(/^Invalid request body: items: /);
  });

  it('puts x-request-id on every response, echoing a well-formed incoming id and replacing a malformed one', async () => {
    const echoed = await request(platform.url('search')).get('/health').set('x-request-id', 'trace-123.abc');
    expect(echoed.headers['x-request-id']).toBe('trace-123.abc');
    const replaced = await request(platform.url('search')).get('/health').set('x-request-id', 'bad id with spaces');
    expect(replaced.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
    for (const res of [
      await request(platform.url('signals')).get('/api/v1/items/x'),
      await request(platform.url('aggregator')).get('/v1/me'),
    ]) {
      expect(res.status).toBe(401);
      expect(res.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
    }
    const c = await request(platform.url('aggregator')).get('/v1/me');
    expect(c.body.error.requestId).toBe(c.headers['x-request-id']);
  });

  it('answers an unexpected failure with 500 that leaks nothing, and logs it with the request id', async () => {
    // A key no request has used yet: a used key's record is reused for a second without a query.
    const unread = await platform.apiKey('signals');
    await platform.ctx.pool.query('ALTER TABLE signals.api_keys RENAME TO api_keys_moved');
    try {
      const res = await request(platform.url('signals')).get('/api/v1/items').set('x-api-key', unread);
      expect(res.status).toBe(500);
      expect(res.body).toEqual({ error: 'internal_error', message: 'Internal error; quote the x-request-id header when reporting it' });
      expect(JSON.stringify(res.body)).not.toMatch(/api_keys|relation|select/i);
      const logged = logLines.find((l) => l.requestId === res.headers['x-request-id'] && l.msg === 'request failed');
      expect(logged?.err?.message).toMatch(/api_keys/);
    } finally {
      await platform.ctx.pool.query('ALTER TABLE signals.api_keys_moved RENAME TO api_keys');
    }
  });

  it('renders shape B as {code, error, message}', () => {
    expect(errorBody('B', new HttpError(400, 'name is required', { code: 'invalid_request' }), 'r1'))
      .toEqual({ code: 'invalid_request', error: 'Bad Request', message: 'name is required' });
  });
});

describe('health and readiness', () => {
  it('answers /health on every service', async () => {
    for (const service of ['signals', 'aggregator', 'search'] as const) {
      const res = await request(platform.url(service)).get('/health');
      expect(res.status).toBe(200);
      expect(res.body).toEqual({ status: 'ok', service });
    }
  });

  it('answers /ready 503 while no worker runs, and when migrations are not current', async () => {
    const res = await request(platform.url('search')).get('/ready');
    expect(res.status).toBe(503);
    expect(res.body).toMatchObject({ status: 'not_ready', checks: { database: { ok: true }, migrations: { ok: true }, worker: { ok: false, workers: 0 } } });
    await platform.ctx.pool.query(`INSERT INTO platform.worker_heartbeats (worker_id, hostname, pid) VALUES ('w-test', 'h', 1)`);
    const ready = await request(platform.url('signals')).get('/ready');
    expect(ready.status).toBe(200);
    expect(ready.body).toMatchObject({ status: 'ready', checks: { worker: { ok: true, workers: 1 } } });
    await platform.ctx.pool.query(`DELETE FROM platform.schema_migrations WHERE version = 1`);
    const stale = await request(platform.url('aggregator')).get('/ready');
    expect(stale.status).toBe(503);
    expect(stale.body.checks.migrations).toMatchObject({ ok: false, current: false });
  });
});
