/**
 * Files only the platform's own user may read: the outboxes (login and guardian codes, review
 * links) and the stored objects (uploads, reports) hold personal data (review of issue 29). Their
 * directories are made 0700 and their files 0600, set explicitly (chmod) so that the process's
 * umask neither widens nor narrows them.
 */
import { chmod, mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';

export const PRIVATE_DIR_MODE = 0o700;
export const PRIVATE_FILE_MODE = 0o600;

/**
 * Creates `dir` and its missing parents with mode 0700. Directories that already existed are left
 * as they are (they may be shared, e.g. DATA_DIR, or not ours to change).
 */
export async function mkdirPrivate(dir: string): Promise<void> {
  const first = await mkdir(dir, { recursive: true, mode: PRIVATE_DIR_MODE });
  if (first === undefined) return;
  // `first` is the top-most directory created; every one from `dir` up to it was created too.
  for (let d = path.resolve(dir); ; d = path.dirname(d)) {
    await chmod(d, PRIVATE_DIR_MODE);
    if (d === path.resolve(first) || d === path.dirname(d)) break;
  }
}

/** Writes `data` to a new or truncated `file` with mode 0600 (the file is never readable by others, even for a moment). */
export async function writePrivateFile(file: string, data: string | Uint8Array): Promise<void> {
  await writeFile(file, data, { mode: PRIVATE_FILE_MODE });
  await chmod(file, PRIVATE_FILE_MODE);
}
