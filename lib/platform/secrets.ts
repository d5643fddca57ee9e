/** Secrets generated once into `<DATA_DIR>/keys/` when the configuration does not give them. */
import { randomUUID } from 'node:crypto';
import { link, mkdir, readFile, unlink, writeFile } from 'node:fs/promises';
import path from 'node:path';

/**
 * Returns the content of `<dataDir>/keys/<name>`, creating it with `generate()` on first use
 * (mode 0600). Two processes racing on first use both end up with the whole file that won.
 */
export async function readOrCreateSecret(dataDir: string, name: string, generate: () => string | Promise<string>): Promise<string> {
  const dir = path.join(dataDir, 'keys');
  const file = path.join(dir, name);
  await mkdir(dataDir, { recursive: true });
  await mkdir(dir, { recursive: true, mode: 0o700 });
  try {
    return (await readFile(file, 'utf8')).trim();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  const value = await generate();
  // Written whole under a temporary name, then linked into place: link() fails if the file exists,
  // and a racing process (api and worker starting together on a shared DATA_DIR) never reads it half-written.
  const tmp = `${file}.${process.pid}.${randomUUID()}.tmp`;
  await writeFile(tmp, value, { mode: 0o600, flag: 'wx' });
  try {
    await link(tmp, file).catch(async (err: NodeJS.ErrnoException) => {
      // A filesystem without hard links: an exclusive create is the next best thing.
      if (err.code === 'EPERM' || err.code === 'ENOTSUP' || err.code === 'ENOSYS') await writeFile(file, value, { mode: 0o600, flag: 'wx' });
      else throw err;
    });
    return value;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    return (await readFile(file, 'utf8')).trim();
  } finally {
    await unlink(tmp).catch(() => {});
  }
}
