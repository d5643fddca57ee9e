/**
 * `<DATA_DIR>/instance.json`: who is using the embedded database of DATA_DIR. `ldp start` records
 * there its pid, database URL and service URLs while it runs, so that other `ldp` commands (keys,
 * aggregator, token, upload) find the running instance and use its database.
 *
 * Every process that starts the embedded server claims the file first (`openInstance`): a
 * process that started the cluster stops it when done, and a second process that started it
 * meanwhile would take the running server for one left by a dead process and stop it under the
 * first. So `ldp start` claims the file before it starts PostgreSQL and fills it in once the
 * database runs; a command that finds it waits for that database and uses it; a command that
 * starts the server for itself holds a claim of kind `command` until it has stopped it, and the
 * others wait for it to end.
 */
import { randomBytes } from 'node:crypto';
import { link, mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

export interface InstanceInfo {
  pid: number;
  database_url: string;
  urls: { signals: string; search: string; aggregator: string };
  started_at: string;
}

/** `platform`: `ldp start` (absent in files written before kinds); `command`: any other process, for its own server. */
export type ClaimKind = 'platform' | 'command';

/** What the file holds: a claim, filled in with the database and services once `ldp start` runs them. */
type Claim = Pick<InstanceInfo, 'pid' | 'started_at'> & Partial<InstanceInfo> & { kind?: ClaimKind };

const fileOf = (dataDir: string) => path.join(dataDir, 'instance.json');

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The claim in `dataDir` when its process lives, else null (none, unreadable, or left by a process that is gone). */
async function readClaim(dataDir: string): Promise<Claim | null> {
  try {
    const info = JSON.parse(await readFile(fileOf(dataDir), 'utf8')) as Claim;
    return alive(info.pid) ? info : null;
  } catch {
    return null;
  }
}

/**
 * The instance `ldp start` runs from `dataDir`, or null when none does (no claim, a claim of a
 * process that is gone, or a command's). While a live `ldp start` has claimed the directory but
 * its database is not up yet, polls every 100 ms until it is, up to `waitMs` (default 120 s).
 * @throws Error when the database of a starting instance is still not up after `waitMs`.
 */
export async function readInstance(dataDir: string, waitMs = 120_000): Promise<InstanceInfo | null> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    const claim = await readClaim(dataDir);
    if (!claim || claim.kind === 'command') return null;
    if (claim.database_url) return claim as InstanceInfo;
    if (Date.now() >= deadline) throw new Error(heldTooLong(dataDir, claim, waitMs));
    await sleep(100);
  }
}

function heldTooLong(dataDir: string, claim: Claim, waitMs: number): string {
  const who = claim.kind === 'command' ? `an ldp command (pid ${claim.pid}) that started it for itself` : `ldp start (pid ${claim.pid}), starting or stopping`;
  return `The embedded database of ${dataDir} has been held for ${waitMs / 1000} s by ${who} `
    + `(if no ldp process with that pid runs, remove ${fileOf(dataDir)})`;
}

/** Writes `claim` to a file of its own beside instance.json, so that a reader never sees it half-written. */
async function writeWhole(dataDir: string, claim: Claim): Promise<string> {
  const tmp = `${fileOf(dataDir)}.${process.pid}.${randomBytes(4).toString('hex')}`;
  await writeFile(tmp, `${JSON.stringify(claim, null, 2)}\n`, { mode: 0o600 });
  return tmp;
}

/**
 * For a process about to use the embedded database of `dataDir`: the running `ldp start`'s
 * record when there is one (waiting for its database while it starts), else null once this
 * process holds the claim of `kind` (it then starts the server, and calls `releaseInstance` after
 * stopping it). The claim is linked into place, which fails when the file exists (link(2),
 * EEXIST), so of two processes at once one wins; a claim left by a process that is gone is
 * replaced. While another process holds a claim without a database (a command's, or a platform
 * starting or stopping), polls every 100 ms, up to `waitMs` (default 120 s); `onWait` is called
 * once, with the holder's pid, when it has to wait.
 * @throws Error "already running" for kind `platform` when an `ldp start` holds it; Error when the
 *   claim is still held after `waitMs`.
 */
export async function openInstance(dataDir: string, kind: ClaimKind,
  options: { waitMs?: number; onWait?: (pid: number) => void } = {}): Promise<InstanceInfo | null> {
  const waitMs = options.waitMs ?? 120_000;
  const deadline = Date.now() + waitMs;
  await mkdir(dataDir, { recursive: true });
  const tmp = await writeWhole(dataDir, { pid: process.pid, started_at: new Date().toISOString(), kind });
  let waited = false;
  try {
    for (;;) {
      try {
        await link(tmp, fileOf(dataDir));
        return null;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      }
      const holder = await readClaim(dataDir);
      if (!holder) {
        await rm(fileOf(dataDir), { force: true });
        continue;
      }
      if (holder.kind !== 'command') {
        if (kind === 'platform') {
          throw new Error(`The platform is already running from ${dataDir} (pid ${holder.pid}); stop it first, or add parts with \`ldp serve\` / \`ldp worker\``);
        }
        if (holder.database_url) return holder as InstanceInfo;
      }
      if (Date.now() >= deadline) throw new Error(heldTooLong(dataDir, holder, waitMs));
      if (!waited) options.onWait?.(holder.pid);
      waited = true;
      await sleep(100);
    }
  } finally {
    await rm(tmp, { force: true });
  }
}

/** Records the running instance in place of this process's claim (mode 0600: the file holds the database password). */
export async function writeInstance(dataDir: string, info: InstanceInfo): Promise<void> {
  await rename(await writeWhole(dataDir, { ...info, kind: 'platform' }), fileOf(dataDir));
}

/**
 * Lets go of this process's claim: first takes the database out of the record (`stopping`, before
 * the server stops, so that no command starts using it), or removes the file (after).
 */
export async function releaseInstance(dataDir: string, stage: 'stopping' | 'stopped'): Promise<void> {
  const claim = await readClaim(dataDir);
  if (claim?.pid !== process.pid) return;
  if (stage === 'stopped') await rm(fileOf(dataDir), { force: true });
  else if (claim.database_url) await rename(await writeWhole(dataDir, { pid: claim.pid, started_at: claim.started_at, kind: claim.kind }), fileOf(dataDir));
}
