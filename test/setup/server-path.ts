/**
 * The server path under test: a PostgreSQL server installed on this machine (Debian's packages,
 * /usr/lib/postgresql/<version>), not the embedded one from npm, with pgvector installed into it.
 * .ci/run installs postgresql-15 and builds the vendored pgvector into it; the README supports
 * PostgreSQL 15-17 with pgvector >= 0.8. TEST_PG_BINDIR names another installation's bin directory.
 */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';

/** PostgreSQL major versions of the server path, newest first. */
export const SERVER_VERSIONS = [17, 16, 15];

/** How to get the server path where it is missing (said by every skip). */
export const NEEDS_SERVER = '.ci/run installs it (apt-get install -y postgresql-15 postgresql-server-dev-15, then builds ../shared/vendor/pgvector into it)';

/** The extension directory of the installation whose binaries are in `binDir`. */
function extensionDir(binDir: string): string {
  try {
    return path.join(execFileSync(path.join(binDir, 'pg_config'), ['--sharedir'], { encoding: 'utf8' }).trim(), 'extension');
  } catch {
    // pg_config missing: Debian's layout.
    return path.join('/usr/share/postgresql', path.basename(path.dirname(binDir)), 'extension');
  }
}

/**
 * The bin directory of the server to test (TEST_PG_BINDIR, else the newest of SERVER_VERSIONS
 * installed with pgvector), or why there is none: `{ absent }` names the first missing file.
 */
export function serverPath(): { binDir: string } | { absent: string } {
  const candidates = process.env.TEST_PG_BINDIR ? [process.env.TEST_PG_BINDIR] : SERVER_VERSIONS.map((v) => `/usr/lib/postgresql/${v}/bin`);
  // Named in the reason: pgvector of an installed server, else the server CI installs (the last).
  let missing = path.join(candidates.at(-1)!, 'initdb');
  for (const binDir of candidates.filter((dir) => existsSync(path.join(dir, 'initdb')))) {
    const control = path.join(extensionDir(binDir), 'vector.control');
    if (existsSync(control)) return { binDir };
    missing = control;
  }
  return { absent: `${missing} is absent; ${NEEDS_SERVER}` };
}
