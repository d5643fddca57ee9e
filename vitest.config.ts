import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';
import { serverPath } from './test/setup/server-path.ts';

/**
 * Test files that run on both paths (docs/decisions.md, issue 31): the embedded PostgreSQL with the
 * in-process vector index (usearch), and a PostgreSQL server with pgvector (test/setup/server-path.ts).
 */
export const SERVER_PATH_TESTS = [
  'test/platform/migrations.test.ts',
  'test/search/search-api.test.ts',
  'test/search/search-index.test.ts',
  'test/search/search-geo-cells.test.ts',
  'test/search/search-after-bulk.test.ts',
];
/** Tests of the server path alone (pgvector's own index upkeep, roles; backups through pg_dump of the server's version). */
const SERVER_ONLY_TESTS = ['test/search/pgvector-server.test.ts', 'test/platform/backup-server.test.ts'];

const server = serverPath();

export default defineConfig({
  test: {
    pool: 'forks',
    // Two test files at a time at least: vitest's default (one fewer than the cores) runs one at a
    // time on a 2-core machine, while the files mostly wait on PostgreSQL, child processes and
    // timers (765–937 s that way, 413–509 s two at a time; docs/decisions.md, "The test run").
    maxWorkers: Math.max(2, availableParallelism() - 1),
    testTimeout: 30_000,
    hookTimeout: 120_000,
    // Each project starts one PostgreSQL for the run; each test file works in its own database
    // cloned from a migrated template (test/helpers/platform.ts).
    projects: [
      { extends: true, test: { name: 'embedded', include: ['test/**/*.test.ts'], exclude: SERVER_ONLY_TESTS, globalSetup: ['test/setup/global-setup.ts'] } },
      'binDir' in server
        ? { extends: true, test: { name: 'pgvector-server', include: [...SERVER_PATH_TESTS, ...SERVER_ONLY_TESTS], globalSetup: ['test/setup/server-setup.ts'] } }
        // No server here: one skipped test says why (CI always has it after .ci/run).
        : { extends: true, test: { name: 'pgvector-server', include: ['test/setup/server-absent.ts'] } },
    ],
  },
});
