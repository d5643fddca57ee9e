/**
 * Backups that restore (issue 31), through the real CLI: an instance run by `ldp start` on the
 * embedded database holds seekers onboarded by `ldp upload` (with an error report), a registration
 * link and their search index; `ldp backup` copies it while it runs; `ldp restore` refuses a target
 * that is not empty, a corrupted file and a different PII key, then restores into a fresh DATA_DIR;
 * started there, the instance loads the search index file saved before the backup (the same graph,
 * not a rebuilt one: an HNSW graph built again answers near-ties differently) and answers the same searches, exports the same phones, serves the same
 * error report, accepts the tokens and keys made before, and registers through the same link.
 */
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { cp, readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { parse } from 'csv-parse/sync';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../lib/platform/free-port.ts';
import { runLdp, spawnLdpUntil, stopChild } from '../helpers/cli.ts';
import { createTestDatabase, tempDir } from '../helpers/platform.ts';
import { indexSaved, observe, searchSettled, type Observed } from '../helpers/backup.ts';

let root: string;
const children: ChildProcess[] = [];

async function envFor(dataDir: string): Promise<Record<string, string>> {
  return {
    DATA_DIR: dataDir, EMBEDDING_PROVIDER: 'hashing', SEARCH_TEXT_SIMILARITY_THRESHOLD: '0.2',
    EMBEDDED_POSTGRES_PORT: String(await freePort()),
    SIGNALS_PORT: String(await freePort()), AGGREGATOR_PORT: String(await freePort()), SEARCH_PORT: String(await freePort()),
  };
}

/** `ldp start` until its worker runs; the printed base URLs. */
async function start(env: Record<string, string>): Promise<{ child: ChildProcess; urls: Record<string, string> }> {
  const { child, out } = await spawnLdpUntil(['start'], env, (o) => o.includes('worker     running'));
  children.push(child);
  return { child, urls: Object.fromEntries(out.split('\n').filter((l) => l.includes('http://')).map((l) => l.trim().split(/\s+/))) };
}

async function ldp(args: string[], env: Record<string, string>, timeoutMs = 120_000) {
  const res = await runLdp(args, env, timeoutMs);
  if (res.code !== 0) throw new Error(`ldp ${args.join(' ')} exited ${res.code}\n${res.stderr}`);
  return res.stdout;
}

afterAll(async () => {
  for (const c of children) await stopChild(c).catch(() => {});
  if (root) await rm(root, { recursive: true, force: true });
});

describe('ldp backup and ldp restore on the embedded default', () => {
  let envA: Record<string, string>;
  let backupDir: string;
  let auth: { token: string; searchKey: string };
  let agg: { aggregator_id: string; org_slug: string };
  let linkSlug: string;
  let uploadId: string;
  let participantIds: string[];
  let before: Observed;
  let passed: number;

  beforeAll(async () => {
    root = await tempDir('ldp-backup-');
    envA = await envFor(path.join(root, 'a'));
    const a = await start(envA);
    agg = JSON.parse(await ldp(['aggregator', 'create', '--name', 'Kaithal Skills Centre', '--types', 'seeker'], envA));
    auth = {
      token: (await ldp(['token', '--aggregator', agg.aggregator_id, '--ttl', '2h'], envA)).trim(),
      searchKey: (await ldp(['keys', 'create', '--service', 'search', '--name', 'backup-drill'], envA)).trim(),
    };
    const file = path.join(root, 'seekers.csv');
    await ldp(['fixtures', 'seekers', '--count', '300', '--seed', '31', '--error-rate', '0.1', '--out', file], envA);
    const upload = await ldp(['upload', file, '--type', 'seeker', '--attest', '--wait', '--interval', '100', '--aggregator', agg.aggregator_id], envA);
    uploadId = /bulk upload ([0-9a-f-]{36})/.exec(upload)![1];
    passed = Number(/(\d+) passed/.exec(upload)![1]);
    expect(upload).toContain('error report: object');
    const link = await fetch(`${a.urls.aggregator}/v1/links/create`, {
      method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${auth.token}` },
      body: JSON.stringify({ domain: 'seeker', status: 'live' }),
    });
    expect(link.status).toBe(201);
    linkSlug = (await link.json() as { slug: string }).slug;

    const { database_url: dbA } = JSON.parse(await readFile(path.join(envA.DATA_DIR, 'instance.json'), 'utf8'));
    await searchSettled(a.urls.search, dbA, passed);
    const client = new pg.Client({ connectionString: dbA });
    await client.connect();
    participantIds = (await client.query('SELECT participant_id FROM aggregator.participants ORDER BY participant_id')).rows.map((r) => r.participant_id);
    await client.end();
    expect(participantIds).toHaveLength(passed);
    before = await observe(a.urls, auth, participantIds, uploadId);
    expect(before.phones.size).toBe(passed);
    expect(before.searches.slice(0, -1).some((s) => s.ids.length > 0)).toBe(true);
    // At rest, the search process saves its graph (within SAVE_IDLE_MIN_MS of the build it saved at start).
    await indexSaved(envA.DATA_DIR, dbA);

    // While it runs.
    backupDir = path.join(root, 'backup');
    const out = await ldp(['backup', '--out', backupDir], { DATA_DIR: envA.DATA_DIR }, 180_000);
    expect(out).toMatch(/objects: 2 /); // the uploaded file and its error report
    expect(await stopChild(a.child)).toBe(0);
  }, 300_000);

  it('writes a manifest with versions and the size and SHA-256 of every file, and the keys', async () => {
    const manifest = JSON.parse(await readFile(path.join(backupDir, 'manifest.json'), 'utf8'));
    expect(manifest).toMatchObject({
      format: 'ldp-backup/1', platform: { version: expect.any(String) }, postgres: { major: 17 },
      migration_version: expect.any(Number), database: { method: 'base-backup' },
      objects: { count: 2 }, keys: { from_environment: [], pii_key_sha256: expect.stringMatching(/^[0-9a-f]{64}$/) },
    });
    const paths = manifest.files.map((f: { path: string }) => f.path);
    for (const key of ['pii.key', 'jwt-signing-key.jwk', 'internal-api.key', 'postgres-password']) expect(paths).toContain(`keys/${key}`);
    expect(paths).toContain('database/cluster/backup_label');
    expect(paths).toContain('database/cluster/global/pg_control');
    expect(paths.filter((p: string) => p.startsWith('objects/'))).toHaveLength(2);
    expect(paths.filter((p: string) => p.startsWith('search-index/')).sort()).toEqual([
      'search-index/ldp-hashing-ngram-v1-none-384.usearch', 'search-index/ldp-hashing-ngram-v1-none-384.usearch.json']);
    for (const f of manifest.files) expect(f).toEqual({ path: expect.any(String), size: expect.any(Number), sha256: expect.stringMatching(/^[0-9a-f]{64}$/) });
  });

  it('backs up only an instance, into a new or empty directory', async () => {
    const again = await runLdp(['backup', '--out', backupDir], { DATA_DIR: envA.DATA_DIR });
    expect(again.code).toBe(1);
    expect(again.stderr).toContain(`${backupDir} is not empty`);
    const nowhere = path.join(root, 'no-instance');
    const none = await runLdp(['backup', '--out', path.join(root, 'unused')], { DATA_DIR: nowhere });
    expect(none.code).toBe(1);
    expect(none.stderr).toContain(`there is no instance in ${nowhere}`);
    expect(existsSync(nowhere)).toBe(false);
  });

  it('refuses a target that is not empty, a corrupted file and a different PII key, writing nothing', async () => {
    const intoA = await runLdp(['restore', backupDir], { DATA_DIR: envA.DATA_DIR, EMBEDDED_POSTGRES_PORT: envA.EMBEDDED_POSTGRES_PORT });
    expect(intoA.code).toBe(1);
    expect(intoA.stderr).toContain('cannot restore into this target');
    expect(intoA.stderr).toContain(`${path.join(envA.DATA_DIR, 'postgres')} is not empty`);
    expect(intoA.stderr).toContain(`${path.join(envA.DATA_DIR, 'keys')} is not empty`);

    const corrupted = path.join(root, 'corrupted');
    await cp(backupDir, corrupted, { recursive: true });
    const { files } = JSON.parse(await readFile(path.join(corrupted, 'manifest.json'), 'utf8')) as { files: { path: string }[] };
    const objectFile = path.join(corrupted, files.find((f) => f.path.startsWith('objects/'))!.path);
    const bytes = await readFile(objectFile);
    bytes[0] ^= 0xff;
    await writeFile(objectFile, bytes);
    const fresh = path.join(root, 'never-written');
    const bad = await runLdp(['restore', corrupted], { DATA_DIR: fresh, EMBEDDED_POSTGRES_PORT: String(await freePort()) });
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/the backup is corrupted: objects\/\S+ does not match the manifest/);
    expect(existsSync(fresh)).toBe(false);

    const otherKey = await runLdp(['restore', backupDir], { DATA_DIR: fresh, PII_KEY: randomBytes(32).toString('base64') });
    expect(otherKey.code).toBe(1);
    expect(otherKey.stderr).toContain('is not the one the backup was made with');
    expect(existsSync(fresh)).toBe(false);
  });

  it('restores into a fresh DATA_DIR: same searches, same phones, same error report, old credentials, a working link', async () => {
    const envR = await envFor(path.join(root, 'restored'));
    const restored = await runLdp(['restore', backupDir], envR, 180_000);
    expect(restored.code, restored.stderr).toBe(0);
    expect(restored.stdout).toMatch(/^verifying \d+ files against/);
    const r = await start(envR);
    const { database_url: dbR } = JSON.parse(await readFile(path.join(envR.DATA_DIR, 'instance.json'), 'utf8'));
    // The search process's index file came back: loaded at start, not rebuilt.
    await searchSettled(r.urls.search, dbR, passed);
    const { checks } = await (await fetch(`${r.urls.search}/ready`)).json() as { checks: { vector_backend: Record<string, unknown> } };
    expect(checks.vector_backend).toMatchObject({ backend: 'usearch', state: 'ready', size: passed });
    expect(checks.vector_backend.build_seconds).toBeUndefined();
    const after = await observe(r.urls, auth, participantIds, uploadId);
    expect(after.searches).toEqual(before.searches);
    expect(after.phones).toEqual(before.phones);
    expect([...after.phones.values()].every((p) => /^\+91\d{10}$/.test(p))).toBe(true);
    expect(after.errorReport).toBe(before.errorReport);
    expect(parse(after.errorReport.replace(/^\uFEFF/, ''), { columns: true }).length).toBe(300 - passed);

    const me = await fetch(`${r.urls.aggregator}/v1/me`, { headers: { authorization: `Bearer ${auth.token}` } });
    expect(me.status).toBe(200);
    const publicPath = `${r.urls.aggregator}/public/v1/aggregators/${agg.org_slug}/registrations/${linkSlug}`;
    expect((await fetch(publicPath)).status).toBe(200);
    const registered = await fetch(publicPath, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'Simran Kaur', phone: '+91 70111 22334', email: 'simran.kaur@example.in', district: 'Kaithal', state: 'Haryana', skills: ['electrician'], consent_terms: true, consent_privacy: true }),
    });
    expect(registered.status, await registered.clone().text()).toBe(201);
    expect(await stopChild(r.child)).toBe(0);
  }, 300_000);
});

describe('ldp backup against DATABASE_URL', () => {
  it('refuses a pg_dump older than the server, naming what to install', async () => {
    // Debian 12's pg_dump is 15 (.ci/run installs it); the test server is the embedded 17.
    const debian = '/usr/lib/postgresql/15/bin';
    const dir = await tempDir('ldp-backup-old-');
    try {
      const res = await runLdp(['backup', '--out', path.join(dir, 'b'), '--pg-bin', existsSync(path.join(debian, 'pg_dump')) ? debian : dir],
        { DATA_DIR: dir, DATABASE_URL: await createTestDatabase() });
      expect(res.code).toBe(1);
      expect(res.stderr).toContain('pg_dump 17 or newer is needed for PostgreSQL 17');
      expect(res.stderr).toContain('install postgresql-client-17');
      if (existsSync(path.join(debian, 'pg_dump'))) expect(res.stderr).toMatch(/found: pg_dump \(PostgreSQL\) 15\.\d+/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
