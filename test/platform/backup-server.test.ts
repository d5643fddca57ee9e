/**
 * Backups that restore on the server path (issue 31; the `pgvector-server` project, vitest.config.ts):
 * an instance on DATABASE_URL (PostgreSQL with pgvector) with its objects in S3 (s3rver, in-process),
 * as docker-compose runs it, is backed up by `ldp backup` with a pg_dump of the server's version
 * while it runs, and restored by `ldp restore` into an empty database, an empty bucket and a fresh
 * DATA_DIR; `ldp start` there answers the same searches, exports the same phones, serves the same
 * error report and registers through the same link. A database with tables and a bucket with
 * objects are refused.
 */
import type { ChildProcess } from 'node:child_process';
import type { AddressInfo } from 'node:net';
import { createRequire } from 'node:module';
import { readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import request from 'supertest';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BUILT_IN_PLACES, generateSeekers, SEEKER_COLUMNS } from '../../lib/aggregator/fixtures/seekers.ts';
import { freePort } from '../../lib/platform/free-port.ts';
import { observe, searchSettled, type Observed } from '../helpers/backup.ts';
import { csv, onboard } from '../helpers/bulk-upload.ts';
import { runLdp, spawnLdpUntil, stopChild } from '../helpers/cli.ts';
import { createTestDatabase, startTestPlatform, tempDir, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';

// s3rver ships no type declarations: the part of its API used here.
const S3rver = createRequire(import.meta.url)('s3rver') as new (options: Record<string, unknown>) => { run(): Promise<AddressInfo>; close(): Promise<void> };
let s3: InstanceType<typeof S3rver>;
/** The configuration of both instances; S3_* set once s3rver runs (its only credentials are S3RVER). */
const ENV: Record<string, string> = { EMBEDDING_PROVIDER: 'hashing', SEARCH_TEXT_SIMILARITY_THRESHOLD: '0.2', S3_ACCESS_KEY: 'S3RVER', S3_SECRET_KEY: 'S3RVER' };

let platform: TestPlatform;
let root: string;
let child: ChildProcess | undefined;
let agg: TestAggregator;
let searchKey: string;
let linkSlug: string;
let uploadId: string;
let passed: number;
let participantIds: string[];
let before: Observed;

beforeAll(async () => {
  root = await tempDir('ldp-backup-server-');
  s3 = new S3rver({ address: '127.0.0.1', port: 0, silent: true, directory: path.join(root, 's3') });
  ENV.S3_ENDPOINT = `http://127.0.0.1:${(await s3.run()).port}`;
  platform = await startTestPlatform({ worker: true, env: ENV });
  expect(platform.ctx.storage.location).toBe(`s3:${ENV.S3_ENDPOINT}/ldp`);
  agg = await platform.aggregator({ types: ['seeker'] });
  searchKey = await platform.apiKey('search');
  const rows = [...generateSeekers({ count: 200, seed: 31, errorRate: 0.1, duplicateRate: 0.02, places: BUILT_IN_PLACES })];
  const job = await onboard(platform, agg.token, { file: csv([...SEEKER_COLUMNS], rows.map((r) => SEEKER_COLUMNS.map((c) => r.values[c]))) });
  expect(job.status).toBe('completed');
  uploadId = job.upload_id;
  passed = job.passed;
  const link = await request(platform.url('aggregator')).post('/v1/links/create').set('authorization', `Bearer ${agg.token}`).send({ domain: 'seeker', status: 'live' });
  expect(link.status).toBe(201);
  linkSlug = link.body.slug;
  await searchSettled(platform.url('search'), platform.databaseUrl, passed);
  participantIds = (await platform.ctx.pool.query('SELECT participant_id FROM aggregator.participants ORDER BY participant_id')).rows.map((r) => r.participant_id);
  const urls = { search: platform.url('search'), aggregator: platform.url('aggregator') };
  before = await observe(urls, { token: agg.token, searchKey }, participantIds, uploadId);
  expect(before.phones.size).toBe(passed);
  expect(before.searches.slice(0, -1).some((s) => s.ids.length > 0)).toBe(true);
}, 240_000);

afterAll(async () => {
  if (child) await stopChild(child);
  await platform?.stop();
  await s3?.close();
  if (root) await rm(root, { recursive: true, force: true });
});

describe('ldp backup and ldp restore against DATABASE_URL', () => {
  it('backs up with pg_dump while it runs, refuses a database with tables and a bucket with objects, restores into empty ones', async () => {
    const backupDir = path.join(root, 'backup');
    const made = await runLdp(['backup', '--out', backupDir], { ...ENV, DATA_DIR: platform.dataDir, DATABASE_URL: platform.databaseUrl }, 180_000);
    expect(made.code, made.stderr).toBe(0);
    const manifest = JSON.parse(await readFile(path.join(backupDir, 'manifest.json'), 'utf8'));
    expect(manifest.database).toEqual({ method: 'pg_dump', tool: expect.stringMatching(/^pg_dump \(PostgreSQL\) \d+/) });
    expect(manifest.files.map((f: { path: string }) => f.path)).toContain('database/ldp.dump');
    // The uploaded file and its error report, from the bucket.
    expect(manifest.objects).toEqual({ source: `s3:${ENV.S3_ENDPOINT}/ldp`, count: 2, bytes: expect.any(Number) });

    const freshDir = path.join(root, 'restored');
    const full = await runLdp(['restore', backupDir], { ...ENV, DATA_DIR: freshDir, DATABASE_URL: platform.databaseUrl });
    expect(full.code).toBe(1);
    expect(full.stderr).toMatch(/the database of DATABASE_URL is not empty: it has tables \(\w+\.\w+/);
    expect(full.stderr).toMatch(/the object storage \(s3:\S+\/ldp\) is not empty: it holds \S+/);

    const empty = await createTestDatabase({ empty: true });
    const env = {
      ...ENV, DATA_DIR: freshDir, DATABASE_URL: empty, S3_BUCKET: 'restored',
      SIGNALS_PORT: String(await freePort()), AGGREGATOR_PORT: String(await freePort()), SEARCH_PORT: String(await freePort()),
    };
    const restored = await runLdp(['restore', backupDir], env, 180_000);
    expect(restored.code, restored.stderr).toBe(0);
    expect(restored.stdout).toMatch(/database: restored with pg_restore \(PostgreSQL\) \d+/);
    // Planner statistics (not in a dump) taken at once, not by autovacuum minutes later.
    const check = new pg.Client({ connectionString: empty });
    await check.connect();
    const { rows: [stats] } = await check.query(`SELECT last_analyze FROM pg_stat_user_tables WHERE relid = 'search.items'::regclass`);
    await check.end();
    expect(stats.last_analyze).not.toBeNull();

    const started = await spawnLdpUntil(['start'], env, (o) => o.includes('worker     running'));
    child = started.child;
    const urls = Object.fromEntries(started.out.split('\n').filter((l) => l.includes('http://')).map((l) => l.trim().split(/\s+/)));
    await searchSettled(urls.search, empty, passed);
    const after = await observe(urls, { token: agg.token, searchKey }, participantIds, uploadId);
    expect(after).toEqual(before);
    const registered = await request(urls.aggregator).post(`/public/v1/aggregators/${agg.orgSlug}/registrations/${linkSlug}`).send({
      name: 'Simran Kaur', phone: '+91 70111 22334', district: 'Kaithal', state: 'Haryana', skills: ['electrician'], consent_terms: true, consent_privacy: true,
    });
    expect(registered.status, JSON.stringify(registered.body)).toBe(201);
  }, 300_000);
});
