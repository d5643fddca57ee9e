/**
 * `ldp serve --service` with several services (the API container of docker-compose.yml) and
 * `ldp health`, the containers' healthcheck: real processes, real database, real heartbeats.
 */
import type { ChildProcess } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import os from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runLdp, spawnLdp, spawnLdpUntil, stopChild } from '../helpers/cli.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';
import { freePort } from '../../lib/platform/free-port.ts';


/** Starts `ldp serve` and resolves once it has printed one URL line per expected service. */
const serve = (args: string[], env: Record<string, string>, lines: number) =>
  spawnLdpUntil(['serve', ...args], env, (out) => out.split('\n').filter((l) => l.includes('http://')).length === lines);


let platform: TestPlatform;
let env: Record<string, string>;
const children: ChildProcess[] = [];

beforeAll(async () => {
  // No services here, and no worker yet: the commands under test bring their own.
  platform = await startTestPlatform({ services: [] });
  env = {
    DATABASE_URL: platform.databaseUrl, DATA_DIR: platform.dataDir, HOST: '0.0.0.0',
    SIGNALS_PORT: String(await freePort()), AGGREGATOR_PORT: String(await freePort()), SEARCH_PORT: String(await freePort()),
  };
});
afterAll(async () => {
  for (const c of children) await stopChild(c);
  await platform.stop();
});

// Each test spawns several node processes; on a loaded 2-core machine that takes longer than the default 30 s.
describe('ldp serve --service with several services', { timeout: 120_000 }, () => {
  it('serves all three services in one process without a worker, and ldp health --service sees them', async () => {
    const down = await runLdp(['health', '--service', 'all'], env);
    expect(down.code).toBe(1);
    expect(down.stderr).toMatch(/^ldp: signals \(http:\/\/127\.0\.0\.1:\d+\) is not healthy/);

    const { child, out } = await serve(['--service', 'all'], env, 3);
    children.push(child);
    expect(out).not.toContain('worker');
    for (const [name, port] of [['signals', env.SIGNALS_PORT], ['aggregator', env.AGGREGATOR_PORT], ['search', env.SEARCH_PORT]]) {
      expect(out).toContain(`${name.padEnd(10)} http://0.0.0.0:${port}`);
      const res = await fetch(`http://127.0.0.1:${port}/health`);
      expect(await res.json()).toEqual({ status: 'ok', service: name });
    }
    // No worker runs: readiness says so.
    const ready = await fetch(`http://127.0.0.1:${env.SIGNALS_PORT}/ready`);
    expect(ready.status).toBe(503);
    expect(((await ready.json()) as { checks: { worker: unknown } }).checks.worker).toEqual({ ok: false, workers: 0 });

    const healthy = await runLdp(['health', '--service', 'all'], env);
    expect(healthy).toMatchObject({ code: 0, stdout: 'healthy\n' });
    expect((await runLdp(['health', '--service', 'search,signals'], env)).code).toBe(0);

    expect(await stopChild(child)).toBe(0);
  });

  it('takes a comma-separated list, and one name as before', async () => {
    const { child, out } = await serve(['--service', 'search, signals,search'], env, 2);
    children.push(child);
    expect(out).toContain(`search     http://0.0.0.0:${env.SEARCH_PORT}`);
    expect(out).toContain(`signals    http://0.0.0.0:${env.SIGNALS_PORT}`);
    const aggregatorDown = await runLdp(['health', '--service', 'aggregator'], env);
    expect(aggregatorDown.code).toBe(1);
    expect(aggregatorDown.stderr).toMatch(/ldp: aggregator .* is not healthy/);
    expect(await stopChild(child)).toBe(0);

    const single = await serve(['--service', 'search'], env, 1);
    children.push(single.child);
    expect(single.out).toContain('search     http://');
    expect(await stopChild(single.child)).toBe(0);
  });

  it('refuses unknown names', async () => {
    for (const value of ['worker', 'signals,nope', '', 'ALL']) {
      const res = await runLdp(['serve', '--service', value], env);
      expect(res.code, value).toBe(1);
      expect(res.stderr).toContain('--service must be one of signals, aggregator, search, a comma-separated list of them, or all');
    }
  });
});

describe('ldp health --worker', { timeout: 120_000 }, () => {
  it('is healthy only while a worker on this host beats', async () => {
    const none = await runLdp(['health', '--worker'], env);
    expect(none.code).toBe(1);
    expect(none.stderr).toMatch(/^ldp: no worker on .+ beat within 20 s/);

    const worker = spawnLdp(['worker'], env);
    children.push(worker);
    await new Promise<void>((resolve, reject) => {
      worker.stdout!.on('data', (d) => { if (String(d).includes('worker     running')) resolve(); });
      worker.on('exit', (code) => reject(new Error(`ldp worker exited with ${code}`)));
    });
    expect(await runLdp(['health', '--worker'], env)).toMatchObject({ code: 0, stdout: 'healthy\n' });
    // Its jobs yield the CPU to request handling: the worker's thread runs at BACKGROUND_NICE (default 10,
    // or this test's own nice value when that is lower already; proc(5) /proc/PID/stat, the 19th field).
    const stat = await readFile(`/proc/${worker.pid}/stat`, 'utf8');
    expect(Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16])).toBe(Math.max(10, os.getPriority()));

    // A worker elsewhere does not make this host's worker healthy.
    await platform.ctx.pool.query(`UPDATE platform.worker_heartbeats SET hostname = 'another-container'`);
    expect((await runLdp(['health', '--worker'], env)).code).toBe(1);

    expect(await stopChild(worker)).toBe(0);
  });

  it('fails with a clear message when the database is unreachable, or nothing is asked', async () => {
    const unreachable = await runLdp(['health', '--worker'], { ...env, DATABASE_URL: `postgres://x:y@127.0.0.1:${await freePort()}/none` });
    expect(unreachable.code).toBe(1);
    expect(unreachable.stderr).toMatch(/^ldp: database unreachable: /);
    const nothing = await runLdp(['health'], env);
    expect(nothing.code).toBe(1);
    expect(nothing.stderr).toContain('nothing to check');
  });
});
