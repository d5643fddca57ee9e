/**
 * Prometheus metrics (GET /metrics on every service) and request ids carried from a request into
 * the jobs it enqueues and the calls those jobs make to other services.
 */
import { Writable } from 'node:stream';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { metricsAllowed } from '../../api/http/metrics.ts';
import { createLogger } from '../../lib/platform/logger.ts';
import { csv, onboard } from '../helpers/bulk-upload.ts';
import { sample } from '../helpers/metrics.ts';
import { startTestPlatform, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';

let platform: TestPlatform;
let agg: TestAggregator;
const lines: Array<Record<string, unknown>> = [];

beforeAll(async () => {
  const sink = new Writable({
    write(chunk, _encoding, done) {
      for (const line of String(chunk).split('\n')) if (line) lines.push(JSON.parse(line));
      done();
    },
  });
  platform = await startTestPlatform({ worker: true, logger: createLogger('debug', 'ldp', sink) });
  agg = await platform.aggregator();
});
afterAll(() => platform.stop());

describe('GET /metrics', () => {
  it('serves request histograms by route template, job metrics after an upload, queue depth and process metrics', async () => {
    const key = await platform.apiKey('search');
    for (let i = 0; i < 3; i++) {
      await request(platform.url('search')).post('/v1/search').set('x-api-key', key).send({});
    }
    await onboard(platform, agg.token, { file: csv(['name', 'phone', 'state'], [['Asha Devi', '9876543210', 'Haryana']]) });
    await request(platform.url('aggregator')).get('/v1/bulk-uploads/00000000-0000-4000-8000-000000000000').set('authorization', `Bearer ${agg.token}`);

    const res = await request(platform.url('aggregator')).get('/metrics');
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toMatch(/^text\/plain/);
    // The upload reads completed once the finish task has committed; its job is counted when
    // graphile-worker marks it done, a moment later: read the metrics once it is.
    let text = '';
    await expect.poll(async () => {
      text = (await request(platform.url('aggregator')).get('/metrics')).text;
      return sample(text, 'worker_job_duration_seconds_count', { task: 'bulk-upload-finish', outcome: 'success' });
    }, { timeout: 10_000 }).toBe(1);
    expect(sample(text, 'http_request_duration_seconds_count', { service: 'search', method: 'POST', route: '/v1/search', status: '400' })).toBe(3);
    expect(sample(text, 'http_request_duration_seconds_count', { service: 'aggregator', route: '/v1/bulk-uploads/:id', status: '404' })).toBe(1);
    expect(sample(text, 'worker_jobs_total', { task: 'bulk-upload-stage', outcome: 'success' })).toBe(1);
    expect(sample(text, 'worker_jobs_total', { task: 'bulk-upload-chunk', outcome: 'success' })).toBe(1);
    expect(sample(text, 'worker_job_duration_seconds_count', { task: 'bulk-upload-finish', outcome: 'success' })).toBe(1);
    expect(text).toMatch(/^# TYPE worker_queue_depth gauge$/m);
    expect(sample(text, 'process_resident_memory_bytes', {})).toBeGreaterThan(0);
    expect(sample(text, 'bulk_upload_rows', { outcome: 'passed' })).toBe(1);
    expect(sample(text, 'bulk_upload_rows', { outcome: 'failed' })).toBe(0);
    // The search service's index and indexing throughput (its vector index may still be loading).
    await expect.poll(async () => sample((await request(platform.url('search')).get('/metrics')).text, 'search_embedded_items_total', {}), { timeout: 15_000 })
      .toBeGreaterThanOrEqual(1);
    expect(text).toMatch(/^# TYPE search_index_items gauge$/m);
    expect(sample(text, 'search_requests_waiting', {})).toBe(0); // no search waits for a slot now
  });

  it('lets only loopback clients in without a token, and with a token only clients sending it, loopback ones too', () => {
    const token = 'metrics-token-0123456789';
    expect(metricsAllowed('127.0.0.1', undefined, undefined)).toBe(true);
    expect(metricsAllowed('::ffff:127.0.0.1', undefined, undefined)).toBe(true);
    expect(metricsAllowed('::1', undefined, undefined)).toBe(true);
    expect(metricsAllowed('10.1.2.3', undefined, undefined)).toBe(false);
    expect(metricsAllowed('10.1.2.3', `Bearer ${token}`, undefined)).toBe(false);
    expect(metricsAllowed('10.1.2.3', `Bearer ${token}`, token)).toBe(true);
    expect(metricsAllowed('10.1.2.3', `Bearer ${token}x`, token)).toBe(false);
    expect(metricsAllowed('192.168.0.9', 'Basic abc', token)).toBe(false);
    // Behind a reverse proxy on the same host every client is loopback (issue 29).
    expect(metricsAllowed('127.0.0.1', undefined, token)).toBe(false);
    expect(metricsAllowed('::1', `Bearer ${token}x`, token)).toBe(false);
    expect(metricsAllowed('127.0.0.1', `Bearer ${token}`, token)).toBe(true);
  });
});

describe('request ids end to end', () => {
  it('answers with the client x-request-id and carries it into the jobs, their logs and their calls to signals', async () => {
    const requestId = 'req-e2e-0001';
    const created = await request(platform.url('aggregator')).post('/v1/bulk-uploads').set('authorization', `Bearer ${agg.token}`)
      .field('participant_type', 'seeker').attach('file', csv(['name', 'phone', 'state'], [['Ravi Kumar', '9876501234', 'Punjab']]), 'upload.csv');
    const started = await request(platform.url('aggregator')).post(`/v1/bulk-uploads/${created.body.upload_id}/start`)
      .set('authorization', `Bearer ${agg.token}`).set('x-request-id', requestId).send({ attestation: true });
    expect(started.status).toBe(200);
    expect(started.headers['x-request-id']).toBe(requestId);
    const deadline = Date.now() + 20_000;
    const expected = ['bulk-upload-stage', 'bulk-upload-chunk', 'bulk-upload-finish', 'search-index-items'];
    const finished = () => new Set(lines.filter((l) => l.requestId === requestId && l.msg === 'job finished').map((l) => l.taskIdentifier));
    while (!expected.every((task) => finished().has(task)) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));

    const mine = lines.filter((l) => l.requestId === requestId || (l.req as { id?: string } | undefined)?.id === requestId);
    // The start request, the stage/chunk/finish jobs, the push to signals and the indexing job it enqueued.
    const tasks = new Set(mine.filter((l) => l.msg === 'job finished').map((l) => l.taskIdentifier));
    expect([...tasks]).toEqual(expect.arrayContaining(expected));
    expect(mine.some((l) => l.service === 'signals' && (l.req as { url?: string } | undefined)?.url === '/api/v1/items/batch')).toBe(true);
  });
});
