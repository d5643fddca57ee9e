/**
 * The claim on DATA_DIR's embedded database (lib/platform/instance.ts): one `ldp start` at a time;
 * a command waits for a starting instance's database instead of starting the cluster itself, and
 * waits while another process runs the server for itself.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { openInstance, readInstance, releaseInstance, writeInstance, type InstanceInfo } from '../../lib/platform/instance.ts';
import { tempDir } from '../helpers/platform.ts';

const dirs: string[] = [];
const children: ChildProcess[] = [];
afterEach(async () => {
  for (const c of children.splice(0)) c.kill('SIGKILL');
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

async function dataDir(): Promise<string> {
  const dir = await tempDir('ldp-instance-');
  dirs.push(dir);
  return dir;
}
const fileOf = (dir: string) => path.join(dir, 'instance.json');
const readFileJson = async (dir: string) => JSON.parse(await readFile(fileOf(dir), 'utf8'));
const info = (pid: number): InstanceInfo => ({
  pid, database_url: 'postgres://postgres:pw@127.0.0.1:5999/ldp', started_at: '2026-11-27T10:00:00.000Z',
  urls: { signals: 'http://127.0.0.1:1', search: 'http://127.0.0.1:2', aggregator: 'http://127.0.0.1:3' },
});
/** A live process other than this one, to hold a claim. */
function otherProcess(): number {
  const child = spawn('sleep', ['60']);
  children.push(child);
  return child.pid!;
}

describe('instance.json', () => {
  it('lets one ldp start claim DATA_DIR: a second is refused naming the first pid, until it has let go', async () => {
    const dir = await dataDir();
    expect(await openInstance(dir, 'platform')).toBeNull();
    await expect(openInstance(dir, 'platform')).rejects.toThrow(`already running from ${dir} (pid ${process.pid})`);
    await releaseInstance(dir, 'stopped');
    expect(await openInstance(dir, 'platform')).toBeNull();
    expect(await readFileJson(dir)).toMatchObject({ pid: process.pid, kind: 'platform' });
  });

  it('replaces the claim of a process that is gone, and reads no instance from it', async () => {
    const dir = await dataDir();
    const gone = spawnSync('true').pid!;
    await writeFile(fileOf(dir), JSON.stringify(info(gone)));
    expect(await readInstance(dir)).toBeNull();
    expect(await openInstance(dir, 'command')).toBeNull();
    expect(await readFileJson(dir)).toMatchObject({ pid: process.pid, kind: 'command' });
  });

  it('makes a command wait while ldp start starts its database, then gives it that database', async () => {
    const dir = await dataDir();
    expect(await openInstance(dir, 'platform')).toBeNull();
    await expect(readInstance(dir, 300)).rejects.toThrow(`has been held for 0.3 s by ldp start (pid ${process.pid}), starting or stopping`);
    let read = false;
    const reading = readInstance(dir).then((r) => { read = true; return r; });
    const opening = openInstance(dir, 'command');
    await new Promise((resolve) => setTimeout(resolve, 400));
    expect(read).toBe(false);
    const running = info(process.pid);
    await writeInstance(dir, running);
    expect(await reading).toMatchObject(running);
    expect(await opening).toMatchObject(running);
    // Stopping: the database is taken out of the record before the server stops.
    await releaseInstance(dir, 'stopping');
    expect(await readFileJson(dir)).toEqual({ pid: process.pid, started_at: running.started_at, kind: 'platform' });
    await releaseInstance(dir, 'stopped');
    expect(await readInstance(dir)).toBeNull();
  });

  it('makes every other process wait while a command runs the server for itself, then lets the next one claim it', async () => {
    const dir = await dataDir();
    const holder = otherProcess();
    await writeFile(fileOf(dir), JSON.stringify({ pid: holder, started_at: '2026-11-27T10:00:00.000Z', kind: 'command' }));
    expect(await readInstance(dir)).toBeNull();
    await expect(openInstance(dir, 'command', { waitMs: 300 }))
      .rejects.toThrow(`has been held for 0.3 s by an ldp command (pid ${holder}) that started it for itself`);
    const waitedFor: number[] = [];
    let claimed = false;
    const opening = openInstance(dir, 'platform', { onWait: (pid) => waitedFor.push(pid) }).then((r) => { claimed = true; return r; });
    await new Promise((resolve) => setTimeout(resolve, 400));
    expect(claimed).toBe(false);
    expect(waitedFor).toEqual([holder]);
    await rm(fileOf(dir));
    expect(await opening).toBeNull();
    expect(await readFileJson(dir)).toMatchObject({ pid: process.pid, kind: 'platform' });
  });
});
