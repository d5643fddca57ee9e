/**
 * The DATA_DIR claim of `ldp start` (lib/platform/instance.ts): one live owner at a time; a
 * command waits for a starting instance's database instead of starting the cluster itself.
 */
import { spawnSync } from 'node:child_process';
import { readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { claimInstance, readInstance, removeInstance, writeInstance, type InstanceInfo } from '../../lib/platform/instance.ts';
import { tempDir } from '../helpers/platform.ts';

const dirs: string[] = [];
afterEach(async () => {
  for (const d of dirs.splice(0)) await rm(d, { recursive: true, force: true });
});

const info = (pid: number): InstanceInfo => ({
  pid, database_url: 'postgres://postgres:pw@127.0.0.1:5999/ldp', started_at: new Date().toISOString(),
  urls: { signals: 'http://127.0.0.1:1', search: 'http://127.0.0.1:2', aggregator: 'http://127.0.0.1:3' },
});

describe('instance.json', () => {
  it('claims DATA_DIR once: a second claim while the first holder lives is refused, naming its pid', async () => {
    const dir = await tempDir('ldp-instance-');
    dirs.push(dir);
    await claimInstance(dir);
    await expect(claimInstance(dir)).rejects.toThrow(`already running from ${dir} (pid ${process.pid})`);
    await removeInstance(dir);
    await claimInstance(dir);
    expect(JSON.parse(await readFile(path.join(dir, 'instance.json'), 'utf8'))).toMatchObject({ pid: process.pid });
  });

  it('replaces the claim of a process that is gone, and reads no instance from it', async () => {
    const dir = await tempDir('ldp-instance-');
    dirs.push(dir);
    const gone = spawnSync('true').pid!;
    await writeFile(path.join(dir, 'instance.json'), JSON.stringify(info(gone)));
    expect(await readInstance(dir)).toBeNull();
    await claimInstance(dir);
    expect(JSON.parse(await readFile(path.join(dir, 'instance.json'), 'utf8')).pid).toBe(process.pid);
  });

  it('makes a reader wait while the owner starts its database, and gives the database once recorded', async () => {
    const dir = await tempDir('ldp-instance-');
    dirs.push(dir);
    await claimInstance(dir);
    await expect(readInstance(dir, 300)).rejects.toThrow(`(pid ${process.pid}) has had no database for 0.3 s`);
    const reading = readInstance(dir);
    let read = false;
    void reading.then(() => { read = true; });
    await new Promise((resolve) => setTimeout(resolve, 400));
    expect(read).toBe(false);
    const running = info(process.pid);
    await writeInstance(dir, running);
    expect(await reading).toEqual(running);
    await removeInstance(dir);
    expect(await readInstance(dir)).toBeNull();
  });
});
