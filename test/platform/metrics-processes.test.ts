/**
 * Metrics where the work is (issue 29), in both ways the README runs the platform, as real
 * processes on a real database: `ldp start` (the worker in a thread: its job series on the
 * services' `/metrics`) and `ldp serve` + `ldp worker` (the worker's own port, WORKER_METRICS_PORT);
 * with METRICS_TOKEN set, loopback clients need it too.
 */
import type { ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnLdpUntil, stopChild } from '../helpers/cli.ts';
import { csv } from '../helpers/bulk-upload.ts';
import { duplicates, sample } from '../helpers/metrics.ts';
import { startTestPlatform, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';
import { until } from '../helpers/until.ts';
import { freePort } from '../../lib/platform/free-port.ts';

let platform: TestPlatform;
let agg: TestAggregator;
const children: ChildProcess[] = [];

beforeAll(async () => {
  // The database, DATA_DIR (keys) and an aggregator's token; the processes under test bring the rest.
  platform = await startTestPlatform({ services: [] });
  agg = await platform.aggregator();
});
afterAll(async () => {
  for (const c of children) await stopChild(c);
  await platform.stop();
});

async function baseEnv(): Promise<Record<string, string>> {
  return {
    DATABASE_URL: platform.databaseUrl, DATA_DIR: platform.dataDir,
    SIGNALS_PORT: String(await freePort()), AGGREGATOR_PORT: String(await freePort()), SEARCH_PORT: String(await freePort()),
  };
}

/** Starts `ldp ...args` until its worker line (or the services' URL lines) is printed; the URLs by first word. */
async function spawn(args: string[], env: Record<string, string>, ready: (out: string) => boolean) {
  const { child, out } = await spawnLdpUntil(args, env, ready);
  children.push(child);
  return { child, out, urls: Object.fromEntries(out.split('\n').filter((l) => /^\w+ +http:/.test(l)).map((l) => l.trim().split(/\s+/))) };
}

/** Creates and starts a one-row seeker upload through the aggregator at `url`. */
async function upload(url: string): Promise<void> {
  const form = new FormData();
  form.set('participant_type', 'seeker');
  form.set('file', new Blob([csv(['name', 'phone', 'state'], [['Asha Devi', '9876543210', 'Haryana']])]), 'upload.csv');
  const auth = { authorization: `Bearer ${agg.token}` };
  const created = await fetch(`${url}/v1/bulk-uploads`, { method: 'POST', headers: auth, body: form });
  const { upload_id: id } = await created.json() as { upload_id: string };
  expect(created.status).toBe(201);
  const started = await fetch(`${url}/v1/bulk-uploads/${id}/start`, {
    method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify({ attestation: true }),
  });
  expect(started.status).toBe(200);
}

const scrape = (url: string, token?: string) => fetch(`${url}/metrics`, { headers: token ? { authorization: `Bearer ${token}` } : {} });
const chunkJobs = (text: string) => sample(text, 'worker_jobs_total', { task: 'bulk-upload-chunk', outcome: 'success' });

describe('metrics where the work is', { timeout: 120_000 }, () => {
  it('ldp start: every service port shows the worker thread\'s job series after an upload, each series once', async () => {
    const { child, urls } = await spawn(['start'], await baseEnv(), (o) => o.includes('worker     running'));
    await upload(urls.aggregator);

    const text = await until('the chunk job on the aggregator\'s /metrics', async () => {
      const body = await (await scrape(urls.aggregator)).text();
      return chunkJobs(body) === 1 && body;
    }, 60_000);
    expect(sample(text, 'worker_jobs_total', { task: 'bulk-upload-stage', outcome: 'success' })).toBe(1);
    expect(sample(text, 'worker_job_duration_seconds_count', { task: 'bulk-upload-chunk', outcome: 'success' })).toBe(1);
    expect(text).toMatch(/^# TYPE worker_queue_depth gauge$/m);
    // Two isolates, one process: the process series once, each isolate's heap apart, nothing twice.
    expect(duplicates(text)).toEqual([]);
    expect(text.match(/^process_resident_memory_bytes[ {]/gm)).toHaveLength(1);
    expect(sample(text, 'process_start_time_seconds', {})).toBeLessThanOrEqual(Date.now() / 1000); // not added up twice
    expect(sample(text, 'nodejs_heap_size_used_bytes', { thread: 'worker' })).toBeGreaterThan(0);
    expect(text).toMatch(/^nodejs_heap_size_used_bytes \d/m);
    // The same on the other ports of the process.
    expect(chunkJobs(await (await scrape(urls.signals)).text())).toBe(1);

    expect(await stopChild(child)).toBe(0);
  });

  it('ldp serve + ldp worker: the worker answers /metrics and /health on WORKER_METRICS_PORT; METRICS_TOKEN is asked of loopback clients', async () => {
    const token = 'metrics-token-0123456789';
    const workerPort = await freePort();
    const env = { ...await baseEnv(), METRICS_TOKEN: token, WORKER_METRICS_PORT: String(workerPort) };
    const serve = await spawn(['serve', '--service', 'all'], env, (o) => (o.match(/http:/g) ?? []).length === 3);
    const worker = await spawn(['worker'], env, (o) => o.includes('worker     running'));
    const workerUrl = `http://127.0.0.1:${workerPort}`;
    expect(worker.out).toContain(`/health and /metrics on ${workerUrl}`);

    expect(await (await fetch(`${workerUrl}/health`)).json()).toEqual({ status: 'ok', service: 'worker' });
    await upload(serve.urls.aggregator);
    const text = await until('the chunk job on the worker\'s /metrics', async () => {
      const body = await (await scrape(workerUrl, token)).text();
      return chunkJobs(body) === 1 && body;
    }, 60_000);
    expect(sample(text, 'worker_job_duration_seconds_count', { task: 'bulk-upload-chunk', outcome: 'success' })).toBe(1);
    expect(text).toMatch(/^# TYPE worker_queue_depth gauge$/m);
    expect(sample(text, 'process_resident_memory_bytes', {})).toBeGreaterThan(0);
    expect(duplicates(text)).toEqual([]);

    // This test's client is loopback: without the token (or with another) it is refused on every port.
    for (const url of [workerUrl, serve.urls.aggregator, serve.urls.search]) {
      expect((await scrape(url)).status, url).toBe(404);
      expect((await scrape(url, `${token}x`)).status, url).toBe(404);
      expect((await scrape(url, token)).status, url).toBe(200);
    }
    expect(await (await fetch(`${workerUrl}/nope`)).json()).toEqual({ error: 'not_found', message: 'No route for GET /nope' });

    expect(await stopChild(worker.child)).toBe(0);
    expect(await stopChild(serve.child)).toBe(0);
  });
});
