/**
 * `<DATA_DIR>/instance.json`: written by `ldp start` while it runs on the embedded database, so
 * that other `ldp` commands (keys, aggregator, token, upload) find the running instance.
 *
 * `ldp start` claims the file before it starts PostgreSQL (`claimInstance`, no database yet) and
 * fills it in once the database runs. A command that finds a claim waits for the database rather
 * than starting the cluster itself: it would take the starting server for one left running by a
 * dead process and stop it under the starting platform.
 */
import { link, mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

export interface InstanceInfo {
  pid: number;
  database_url: string;
  urls: { signals: string; search: string; aggregator: string };
  started_at: string;
}

/** What the file holds between the claim and the database running. */
type Claim = Pick<InstanceInfo, 'pid' | 'started_at'> & Partial<InstanceInfo>;

const fileOf = (dataDir: string) => path.join(dataDir, 'instance.json');

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

async function readClaim(dataDir: string): Promise<Claim | null> {
  try {
    const info = JSON.parse(await readFile(fileOf(dataDir), 'utf8')) as Claim;
    return alive(info.pid) ? info : null;
  } catch {
    return null;
  }
}

/**
 * The running instance recorded in `dataDir`, or null when none is recorded or its process is
 * gone. While a live `ldp start` has claimed the directory but its database is not up yet, polls
 * every 100 ms until it is, up to `waitMs` (default 120 s).
 * @throws Error when the database of a starting instance is still not up after `waitMs`.
 */
export async function readInstance(dataDir: string, waitMs = 120_000): Promise<InstanceInfo | null> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    const claim = await readClaim(dataDir);
    if (!claim || claim.database_url) return claim as InstanceInfo | null;
    if (Date.now() >= deadline) {
      throw new Error(`The platform starting from ${dataDir} (pid ${claim.pid}) has had no database for ${waitMs / 1000} s `
        + `(if no \`ldp start\` runs there, remove ${fileOf(dataDir)})`);
    }
    await sleep(100);
  }
}

/** Writes `info` to a file of its own beside instance.json, so that a reader never sees it half-written. */
async function writeWhole(dataDir: string, info: Claim): Promise<string> {
  const tmp = `${fileOf(dataDir)}.${process.pid}`;
  await writeFile(tmp, `${JSON.stringify(info, null, 2)}\n`, { mode: 0o600 });
  return tmp;
}

/**
 * Claims `dataDir` for this process before it starts the embedded database. The claim is linked
 * into place, which fails when the file exists (link(2), EEXIST): of two `ldp start` at once, one
 * wins. A claim left by a process that is gone is replaced.
 * @throws Error naming the pid when a live process holds the claim ("already running").
 */
export async function claimInstance(dataDir: string): Promise<void> {
  await mkdir(dataDir, { recursive: true });
  const tmp = await writeWhole(dataDir, { pid: process.pid, started_at: new Date().toISOString() });
  try {
    for (;;) {
      try {
        await link(tmp, fileOf(dataDir));
        return;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      }
      const holder = await readClaim(dataDir);
      if (holder) {
        throw new Error(`The platform is already running from ${dataDir} (pid ${holder.pid}); stop it first, or add parts with \`ldp serve\` / \`ldp worker\``);
      }
      await removeInstance(dataDir);
    }
  } finally {
    await rm(tmp, { force: true });
  }
}

/** Records the running instance in place of the claim (mode 0600: the file holds the database password). */
export async function writeInstance(dataDir: string, info: InstanceInfo): Promise<void> {
  await rename(await writeWhole(dataDir, info), fileOf(dataDir));
}

export async function removeInstance(dataDir: string): Promise<void> {
  await rm(fileOf(dataDir), { force: true });
}
