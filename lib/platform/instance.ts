/**
 * `<DATA_DIR>/instance.json`: written by `ldp start` while it runs on the embedded database, so
 * that other `ldp` commands (keys, aggregator, token, upload) find the running instance.
 */
import { readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';

export interface InstanceInfo {
  pid: number;
  database_url: string;
  urls: { signals: string; search: string; aggregator: string };
  started_at: string;
}

const fileOf = (dataDir: string) => path.join(dataDir, 'instance.json');

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The running instance recorded in `dataDir`, or null when none is recorded or its process is gone. */
export async function readInstance(dataDir: string): Promise<InstanceInfo | null> {
  try {
    const info = JSON.parse(await readFile(fileOf(dataDir), 'utf8')) as InstanceInfo;
    return alive(info.pid) ? info : null;
  } catch {
    return null;
  }
}

/** Records the running instance (mode 0600: the file holds the database password). */
export async function writeInstance(dataDir: string, info: InstanceInfo): Promise<void> {
  await writeFile(fileOf(dataDir), `${JSON.stringify(info, null, 2)}\n`, { mode: 0o600 });
}

export async function removeInstance(dataDir: string): Promise<void> {
  await rm(fileOf(dataDir), { force: true });
}
