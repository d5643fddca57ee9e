/**
 * The command line of bulk onboarding, run as real `ldp` processes: `ldp fixtures seekers` writes
 * a seekers file (the same for the same seed), and `ldp upload --wait` onboards it through the
 * HTTP API of a running platform, prints the summary and saves the error report.
 */
import { readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { parse } from 'csv-parse/sync';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BUILT_IN_PLACES, generateSeekers, SEEKER_COLUMNS } from '../../lib/aggregator/fixtures/seekers.ts';
import { runLdp } from '../helpers/cli.ts';
import { participantsOf } from '../helpers/bulk-upload.ts';
import { startTestPlatform, tempDir, type TestPlatform } from '../helpers/platform.ts';

let platform: TestPlatform;
let dir: string;

beforeAll(async () => {
  platform = await startTestPlatform({ worker: true });
  dir = await tempDir('ldp-bulk-cli-');
});
afterAll(async () => {
  await platform.stop();
  await rm(dir, { recursive: true, force: true });
});

describe('ldp fixtures seekers and ldp upload', () => {
  it('generates a seeded file and onboards it with --wait, printing the counts and saving the error report', async () => {
    const file = path.join(dir, 'seekers.csv');
    const env = { DATA_DIR: platform.dataDir };
    const generated = await runLdp(['fixtures', 'seekers', '--count', '300', '--seed', '5', '--error-rate', '0.1', '--duplicate-rate', '0.05', '--out', file], env);
    expect(generated.code, generated.stderr).toBe(0);
    const summary = /300 seekers \((\d+) valid, (\d+) with an error, (\d+) duplicates; seed 5/.exec(generated.stderr)!;
    const [valid, errors, duplicates] = summary.slice(1).map(Number);
    const rows = parse(await readFile(file), { columns: true }) as Record<string, string>[];
    expect(rows).toHaveLength(300);
    expect(Object.keys(rows[0])).toEqual([...SEEKER_COLUMNS]);

    const agg = await platform.aggregator({ types: ['seeker'], roles: ['operator'] });
    const report = path.join(dir, 'errors.csv');
    const upload = await runLdp(['upload', file, '--type', 'seeker', '--attest', '--wait', '--interval', '100', '--errors-out', report,
      '--url', platform.url('aggregator')], { ...env, LDP_TOKEN: agg.token });
    expect(upload.code, upload.stderr).toBe(0);
    expect(upload.stdout).toMatch(/bulk upload [0-9a-f-]{36}: seekers\.csv \(csv, [\d.]+ MB, uploaded in [\d.]+ s\) is running/);
    expect(upload.stdout).toContain(`completed: 300 rows — ${valid} passed, ${errors} failed, ${duplicates} skipped\n`);
    expect(upload.stdout).toMatch(/time: [\d.]+ s from upload start to completion, \d+ rows\/s/);
    expect(parse(await readFile(report), { columns: true, bom: true })).toHaveLength(errors + duplicates);
    expect(await participantsOf(platform, agg.aggregatorId)).toHaveLength(valid);
  });

  it('generates the same rows for the same seed, and other rows for another', () => {
    const options = { count: 50, errorRate: 0.1, duplicateRate: 0.1, places: BUILT_IN_PLACES };
    const a = [...generateSeekers({ ...options, seed: 9 })];
    expect([...generateSeekers({ ...options, seed: 9 })]).toEqual(a);
    expect([...generateSeekers({ ...options, seed: 10 })]).not.toEqual(a);
  });

  it('refuses to upload without an attestation or a token, and reports the API\'s refusal', async () => {
    const env = { DATA_DIR: platform.dataDir };
    const file = path.join(dir, 'one.csv');
    await writeFile(file, 'name,phone,state\r\nPriya Sharma,9876543210,Haryana\r\n');
    const noAttest = await runLdp(['upload', file, '--type', 'seeker', '--url', platform.url('aggregator'), '--token', 'x'], env);
    expect(noAttest.code).toBe(1);
    expect(noAttest.stderr).toMatch(/Add --attest/);
    const viewer = await platform.aggregator({ types: ['seeker'], roles: ['viewer'] });
    const refused = await runLdp(['upload', file, '--type', 'seeker', '--attest', '--url', platform.url('aggregator'), '--token', viewer.token], env);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/POST \/v1\/bulk-uploads answered 403: This action needs one of the roles admin, operator/);
  });
});
