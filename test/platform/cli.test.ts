import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { API_KEY_CACHE_MS } from '../../api/http/auth.ts';
import { runLdp } from '../helpers/cli.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';

let platform: TestPlatform;
let env: Record<string, string>;

beforeAll(async () => {
  platform = await startTestPlatform();
  // The CLI works on the same database and DATA_DIR (signing key) as the running services.
  env = { DATABASE_URL: platform.databaseUrl, DATA_DIR: platform.dataDir };
});
afterAll(() => platform.stop());

describe('ldp command line', () => {
  it('creates an API key, printed alone, that the service accepts until it is revoked', async () => {
    const created = await runLdp(['keys', 'create', '--service', 'search', '--name', 'partner-a'], env);
    expect(created.code).toBe(0);
    expect(created.stdout).toMatch(/^ldp_search_[A-Za-z0-9_-]{43}\n$/);
    const key = created.stdout.trim();
    const probe = () => request(platform.url('search')).post('/v1/nope').set('x-api-key', key).send({});
    expect((await probe()).status).toBe(404);

    const listed = await runLdp(['keys', 'list', '--service', 'search'], env);
    const line = listed.stdout.split('\n').find((l) => l.includes('partner-a'))!;
    expect(line).toMatch(/active/);
    const keyId = line.split(/\s+/)[0];
    const revoked = await runLdp(['keys', 'revoke', keyId, '--service', 'search'], env);
    expect(revoked.code).toBe(0);
    // The service reuses a key's record read for the first probe for at most API_KEY_CACHE_MS.
    await new Promise((resolve) => setTimeout(resolve, API_KEY_CACHE_MS));
    expect((await probe()).status).toBe(401);
    const again = await runLdp(['keys', 'revoke', keyId, '--service', 'search'], env);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/^ldp: No active search key/);
  });

  it('creates an aggregator (JSON on stdout) and mints a token the aggregator service accepts', async () => {
    const created = await runLdp(['aggregator', 'create', '--name', 'Sahyog Skills Foundation', '--types', 'seeker,provider'], env);
    expect(created.code).toBe(0);
    const agg = JSON.parse(created.stdout);
    expect(agg).toEqual({ aggregator_id: expect.any(String), org_id: expect.any(String), org_slug: 'sahyog-skills-foundation' });

    const minted = await runLdp(['token', '--aggregator', agg.aggregator_id, '--ttl', '30m', '--roles', 'operator'], env);
    expect(minted.code).toBe(0);
    expect(minted.stdout.trim().split('.')).toHaveLength(3);
    const me = await request(platform.url('aggregator')).get('/v1/me').set('authorization', `Bearer ${minted.stdout.trim()}`);
    expect(me.status).toBe(200);
    expect(me.body).toMatchObject({ aggregator_id: agg.aggregator_id, org_slug: 'sahyog-skills-foundation', roles: ['operator'] });
  });

  it('rejects bad arguments with a message and exit code 1', async () => {
    const badType = await runLdp(['aggregator', 'create', '--name', 'X', '--types', 'farmer'], env);
    expect(badType.code).toBe(1);
    expect(badType.stderr).toMatch(/Unknown aggregator type farmer/);
    const badTtl = await runLdp(['token', '--aggregator', 'x', '--ttl', 'forever'], env);
    expect(badTtl.stderr).toMatch(/--ttl must be a duration/);
    const badService = await runLdp(['keys', 'create', '--service', 'aggregator', '--name', 'x'], env);
    expect(badService.stderr).toMatch(/--service must be one of signals, search/);
  });

  it('stops at start with a message naming an invalid variable', async () => {
    const res = await runLdp(['start'], { ...env, SIGNALS_PORT: 'not-a-port', LOG_LEVEL: 'loud' });
    expect(res.code).toBe(1);
    expect(res.stderr).toMatch(/Invalid configuration/);
    expect(res.stderr).toMatch(/SIGNALS_PORT: /);
    expect(res.stderr).toMatch(/LOG_LEVEL: /);
  });
});
