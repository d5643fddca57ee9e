/**
 * Test platform: a fresh database cloned from the migrated template, a temporary DATA_DIR, and the
 * requested parts started through the same path as `ldp start` (bin/platform.ts), on free ports.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { inject } from 'vitest';
import { createApiKey, type KeyService } from '../../lib/platform/api-keys.ts';
import { createAggregator } from '../../lib/aggregator/aggregators.ts';
import { loadConfig, type Config } from '../../lib/platform/config.ts';
import { withTransaction } from '../../lib/platform/db.ts';
import { createLogger, type Logger } from '../../lib/platform/logger.ts';
import type { ServiceName } from '../../api/http/service-app.ts';
import { startPlatform, type PlatformHandle } from '../../bin/platform.ts';

/**
 * Creates a new database cloned from the migrated template (or, with `empty`, a database with no
 * migrations applied); returns its connection string.
 */
export async function createTestDatabase(options: { empty?: boolean } = {}): Promise<string> {
  const server = inject('pgServerUrl');
  const name = `t_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: `${server}postgres` });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${name} TEMPLATE ${options.empty ? 'template0' : inject('templateDb')}`);
  } finally {
    await admin.end();
  }
  return `${server}${name}`;
}

/** A temporary directory, removed by the returned cleanup. */
export async function tempDir(prefix = 'ldp-test-'): Promise<string> {
  return mkdtemp(path.join(os.tmpdir(), prefix));
}

export interface TestAggregator {
  aggregatorId: string;
  orgId: string;
  orgSlug: string;
  /** A bearer token with the requested roles, valid for an hour. */
  token: string;
}

export interface TestPlatform extends PlatformHandle {
  config: Config;
  dataDir: string;
  databaseUrl: string;
  url(service: ServiceName): string;
  /** Creates an API key for `service`. */
  apiKey(service: KeyService): Promise<string>;
  /** Creates an approved aggregator (default types seeker,provider; role admin) and a token for it. */
  aggregator(options?: { name?: string; types?: string[]; roles?: string[] }): Promise<TestAggregator>;
  /** Stops the platform and removes its DATA_DIR (kept with `keepDataDir`, for a test to read what it left). */
  stop(options?: { keepDataDir?: boolean }): Promise<void>;
}

/**
 * Starts `services` (default all three) and optionally the worker on a fresh database.
 * `env` overrides configuration variables (LOG_LEVEL defaults to silent).
 */
export async function startTestPlatform(options: { services?: ServiceName[]; worker?: boolean; env?: Record<string, string>; logger?: Logger } = {}): Promise<TestPlatform> {
  const dataDir = await tempDir();
  const databaseUrl = await createTestDatabase();
  const config = loadConfig({
    LOG_LEVEL: 'silent', DATA_DIR: dataDir, DATABASE_URL: databaseUrl,
    SIGNALS_PORT: '0', AGGREGATOR_PORT: '0', SEARCH_PORT: '0', WORKER_METRICS_PORT: '0', SHUTDOWN_TIMEOUT_MS: '5000',
    ...options.env,
  });
  const handle = await startPlatform(config, options.logger ?? createLogger(config.LOG_LEVEL), databaseUrl, {
    services: options.services ?? ['signals', 'aggregator', 'search'],
    worker: options.worker ?? false,
  });
  return {
    ...handle,
    config,
    dataDir,
    databaseUrl,
    url: (service) => {
      const s = handle.services.find((x) => x.name === service);
      if (!s) throw new Error(`service ${service} is not running in this test platform`);
      return s.url;
    },
    apiKey: async (service) => (await createApiKey(handle.ctx.pool, service, 'test')).key,
    aggregator: async (opts = {}) => {
      const record = await withTransaction(handle.ctx.pool, (client) => createAggregator(client, handle.ctx.network, {
        name: opts.name ?? `Test aggregator ${randomBytes(3).toString('hex')}`, types: opts.types ?? ['seeker', 'provider'],
      }));
      const token = await handle.ctx.tokens.issue({
        sub: `aggregator:${record.aggregator_id}`, aggregator_id: record.aggregator_id, org_id: record.org_id,
        aggregator_type: record.types, roles: opts.roles ?? ['admin'],
      }, 3600);
      return { aggregatorId: record.aggregator_id, orgId: record.org_id, orgSlug: record.org_slug, token };
    },
    stop: async (stopOptions = {}) => {
      await handle.stop();
      if (!stopOptions.keepDataDir) await rm(dataDir, { recursive: true, force: true });
    },
  };
}
