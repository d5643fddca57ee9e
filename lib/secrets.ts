/** Secrets generated once into `<DATA_DIR>/keys/` when the configuration does not give them. */
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';

/**
 * Returns the content of `<dataDir>/keys/<name>`, creating it with `generate()` on first use
 * (mode 0600). Two processes racing on first use both end up with the file that won.
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
  try {
    await writeFile(file, value, { mode: 0o600, flag: 'wx' });
    return value;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    return (await readFile(file, 'utf8')).trim();
  }
}
