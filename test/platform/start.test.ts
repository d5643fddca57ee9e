/**
 * `ldp start` as a self-hoster runs it: embedded PostgreSQL in DATA_DIR, all three services and the
 * worker in one process; other `ldp` commands find it through DATA_DIR; a restart keeps the data.
 */
import type { ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runLdp, spawnLdpUntil, stopChild } from '../helpers/cli.ts';
import { tempDir } from '../helpers/platform.ts';
import { freePort } from '../../lib/platform/free-port.ts';


let dataDir: string;
let env: Record<string, string>;
const children: ChildProcess[] = [];

/** An `ldp start` of its own in `dir`: free ports for its PostgreSQL and services. */
async function platformEnv(dir: string): Promise<Record<string, string>> {
  return {
    DATA_DIR: dir, EMBEDDED_POSTGRES_PORT: String(await freePort()),
    SIGNALS_PORT: String(await freePort()), AGGREGATOR_PORT: String(await freePort()), SEARCH_PORT: String(await freePort()),
  };
}

/** Runs `fn` in a DATA_DIR of its own, removed after. */
async function inDataDir(prefix: string, fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await tempDir(prefix);
  try {
    await fn(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Starts `ldp start` and resolves with the printed base URLs once the worker line appears. */
async function start(): Promise<{ child: ChildProcess; urls: Record<string, string> }> {
  const { child, out } = await spawnLdpUntil(['start'], env, (o) => o.includes('worker     running'));
  children.push(child);
  return { child, urls: Object.fromEntries(out.split('\n').filter((l) => l.includes('http://')).map((l) => l.trim().split(/\s+/))) };
}


afterAll(async () => {
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
  if (dataDir) await rm(dataDir, { recursive: true, force: true });
});

describe('ldp start on the embedded database', () => {
  it('starts everything, serves credentials made from a second shell, stops cleanly and keeps the data', async () => {
    dataDir = await tempDir('ldp-start-');
    env = await platformEnv(dataDir);
    const first = await start();
    expect(Object.keys(first.urls).sort()).toEqual(['aggregator', 'search', 'signals']);
    for (const url of Object.values(first.urls)) expect((await fetch(`${url}/health`)).status).toBe(200);
    await expect.poll(async () => (await fetch(`${first.urls.search}/ready`)).status, { timeout: 10_000 }).toBe(200);
    const instance = JSON.parse(await readFile(path.join(dataDir, 'instance.json'), 'utf8'));
    expect(instance.urls).toEqual(first.urls);

    // A second shell: no DATABASE_URL, only DATA_DIR.
    const shell = { DATA_DIR: dataDir };
    const key = (await runLdp(['keys', 'create', '--service', 'search', '--name', 'second-shell'], shell)).stdout.trim();
    const agg = JSON.parse((await runLdp(['aggregator', 'create', '--name', 'Gram Seva', '--types', 'provider'], shell)).stdout);
    const token = (await runLdp(['token', '--aggregator', agg.aggregator_id], shell)).stdout.trim();
    const search = (k?: string) => fetch(`${first.urls.search}/v1/nope`, { method: 'POST', headers: k ? { 'x-api-key': k } : {} });
    const me = (t?: string) => fetch(`${first.urls.aggregator}/v1/me`, { headers: t ? { authorization: `Bearer ${t}` } : {} });
    expect((await search(key)).status).toBe(404);
    expect((await search()).status).toBe(401);
    expect((await me(token)).status).toBe(200);
    const noToken = await me();
    expect(noToken.status).toBe(401);
    expect(((await noToken.json()) as { error: { code: string } }).error.code).toBe('missing_token');

    expect(await stopChild(first.child)).toBe(0);
    expect(existsSync(path.join(dataDir, 'instance.json'))).toBe(false);

    const second = await start();
    const again = await fetch(`${second.urls.search}/v1/nope`, { method: 'POST', headers: { 'x-api-key': key } });
    expect(again.status).toBe(404);
    expect((await fetch(`${second.urls.aggregator}/v1/me`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(200);
    const dup = await runLdp(['start'], shell);
    expect(dup.code).toBe(1);
    expect(dup.stderr).toMatch(/already running/);
    expect(await stopChild(second.child)).toBe(0);
  }, 120_000);

  it('a command from a second shell while the platform starts uses its database, and does not stop it', async () => {
    await inDataDir('ldp-start-race-', async (dir) => {
      const raceEnv = await platformEnv(dir);
      const starting = spawnLdpUntil(['start'], raceEnv, (o) => o.includes('worker     running'));
      // As soon as PostgreSQL's server starts: before the platform has recorded its database
      // (or a moment after), long before it is up (migrations, services, worker).
      await expect.poll(() => existsSync(path.join(dir, 'postgres', 'postmaster.pid')), { timeout: 60_000, interval: 20 }).toBe(true);
      const key = await runLdp(['keys', 'list', '--service', 'search'], { DATA_DIR: dir });
      const { child, out } = await starting;
      children.push(child);
      expect(key.code, key.stderr).toBe(0);
      const signals = out.split('\n').find((l) => l.startsWith('signals'))!.trim().split(/\s+/)[1];
      expect((await fetch(`${signals}/health`)).status).toBe(200);
      expect(await stopChild(child)).toBe(0);
    });
  }, 120_000);

  it('ldp serve and ldp worker refuse to run where neither DATABASE_URL nor an ldp start is, and start no server', async () => {
    await inDataDir('ldp-start-parts-', async (dir) => {
      for (const args of [['worker'], ['serve', '--service', 'all']]) {
        const res = await runLdp(args, { DATA_DIR: dir, EMBEDDED_POSTGRES_PORT: String(await freePort()) });
        expect(res.code).toBe(1);
        expect(res.stderr).toContain(`ldp serve and ldp worker need DATABASE_URL, or \`ldp start\` running from DATA_DIR (${dir})`);
      }
      expect(existsSync(path.join(dir, 'postgres'))).toBe(false);
      expect(existsSync(path.join(dir, 'instance.json'))).toBe(false);
    });
  }, 60_000);

  it('commands run at once where nothing runs take the embedded database in turn, and so does an ldp start', async () => {
    await inDataDir('ldp-start-turns-', async (dir) => {
      const turnEnv = await platformEnv(dir);
      // Each would otherwise start the cluster for itself and stop another's server under it.
      const names = ['a', 'b', 'c'];
      const created = await Promise.all(names.map((name) => runLdp(['keys', 'create', '--service', 'search', '--name', name], turnEnv)));
      for (const r of created) expect(r.code, r.stderr).toBe(0);
      const starting = spawnLdpUntil(['start'], turnEnv, (o) => o.includes('worker     running'));
      const listed = await runLdp(['keys', 'list', '--service', 'search'], turnEnv);
      const { child } = await starting;
      children.push(child);
      expect(listed.code, listed.stderr).toBe(0);
      for (const name of names) expect(listed.stdout).toMatch(new RegExp(`\\s${name}\\s+active`));
      expect(await stopChild(child)).toBe(0);
      expect(existsSync(path.join(dir, 'instance.json'))).toBe(false);
    });
  }, 120_000);
});
