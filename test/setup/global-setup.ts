/**
 * Starts one embedded PostgreSQL for the whole test run, in a temporary DATA_DIR, and migrates a
 * template database from which every test file clones its own database.
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

export const TEMPLATE_DB = 'ldp_template';


declare module 'vitest' {
  export interface ProvidedContext {
    /** Connection string of the server, ending in `/` (append a database name). */
    pgServerUrl: string;
    templateDb: string;
    /** The vector backend the migrations chose on that server: `usearch` (embedded) or `pgvector` (server path). */
    vectorBackend: 'usearch' | 'pgvector';
  }
}

export default async function setup(project: TestProject) {
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'ldp-test-pg-'));
  const db = await startEmbeddedPostgres({ dataDir, port: await freePort() });
  const serverUrl = db.url.replace(/[^/]+$/, '');
  const admin = new pg.Client({ connectionString: `${serverUrl}postgres` });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${TEMPLATE_DB}`);
  await admin.end();
  const pool = createPool(`${serverUrl}${TEMPLATE_DB}`, 2);
  await migrate(pool);
  await pool.end();
  project.provide('pgServerUrl', serverUrl);
  project.provide('templateDb', TEMPLATE_DB);
  project.provide('vectorBackend', 'usearch');
  return async () => {
    await db.stop();
    await rm(dataDir, { recursive: true, force: true });
  };
}
