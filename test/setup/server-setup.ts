/**
 * Global setup of the `pgvector-server` test project (vitest.config.ts): one throwaway cluster of
 * the PostgreSQL server installed on this machine (test/setup/server-path.ts), started like the
 * embedded one (initdb and pg_ctl; as root, run by the `postgres` system user) on a free port in a
 * temporary directory, and a template database migrated on it: the migrations find pgvector and
 * choose the `pgvector` backend. Every test file clones its own database from the template
 * (test/helpers/platform.ts), as in the embedded project.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { startEmbeddedPostgres } from '../../lib/platform/embedded-postgres.ts';
import { createPool } from '../../lib/platform/db.ts';
import { migrate } from '../../lib/platform/migrate.ts';
import { freePort } from '../../lib/platform/free-port.ts';
import { readVectorBackend } from '../../lib/search/vector-backend.ts';
import { TEMPLATE_DB } from './global-setup.ts';
import { serverPath } from './server-path.ts';

export default async function setup(project: TestProject) {
  const server = serverPath();
  if (!('binDir' in server)) throw new Error(server.absent); // vitest.config.ts does not select this setup then
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'ldp-test-pgserver-'));
  const db = await startEmbeddedPostgres({ dataDir, port: await freePort(), binDir: server.binDir });
  try {
    const serverUrl = db.url.replace(/[^/]+$/, '');
    const admin = new pg.Client({ connectionString: `${serverUrl}postgres` });
    await admin.connect();
    await admin.query(`CREATE DATABASE ${TEMPLATE_DB}`);
    await admin.end();
    const pool = createPool(`${serverUrl}${TEMPLATE_DB}`, 2);
    try {
      await migrate(pool);
      const backend = await readVectorBackend(pool);
      if (backend !== 'pgvector') throw new Error(`the migrations chose the ${backend} backend on ${server.binDir}: pgvector is not usable there`);
    } finally {
      await pool.end();
    }
    project.provide('pgServerUrl', serverUrl);
    project.provide('templateDb', TEMPLATE_DB);
    project.provide('vectorBackend', 'pgvector');
  } catch (err) {
    await db.stop().catch(() => {});
    await rm(dataDir, { recursive: true, force: true });
    throw err;
  }
  return async () => {
    await db.stop();
    await rm(dataDir, { recursive: true, force: true });
  };
}
