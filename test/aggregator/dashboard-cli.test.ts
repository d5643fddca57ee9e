/** `ldp dashboard` and `ldp export` (bin/commands/dashboard.ts, export.ts) as child processes against a test platform's database. */
import { readFile, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { parse as parseCsv } from 'csv-parse/sync';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BUILT_IN_PLACES, generateSeekers, SEEKER_COLUMNS } from '../../lib/aggregator/fixtures/seekers.ts';
import { csv, onboard } from '../helpers/bulk-upload.ts';
import { runLdp } from '../helpers/cli.ts';
import { startTestPlatform, tempDir, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';

const seekerFile = (count: number, seed: number) => {
  const rows = [...generateSeekers({ count, seed, errorRate: 0, duplicateRate: 0, places: BUILT_IN_PLACES })];
  return csv([...SEEKER_COLUMNS], rows.map((r) => SEEKER_COLUMNS.map((c) => r.values[c])));
};

describe('ldp dashboard and ldp export', () => {
  let platform: TestPlatform;
  let agg: TestAggregator;
  let other: TestAggregator;
  let dir: string;
  let env: Record<string, string>;
  beforeAll(async () => {
    platform = await startTestPlatform({ services: ['signals', 'aggregator'], worker: true });
    agg = await platform.aggregator({ name: 'Sahyog Foundation' });
    other = await platform.aggregator();
    await onboard(platform, agg.token, { file: seekerFile(120, 11) });
    await onboard(platform, other.token, { file: seekerFile(30, 12) });
    dir = await tempDir('ldp-export-');
    env = { DATA_DIR: platform.dataDir, DATABASE_URL: platform.databaseUrl };
  }, 120_000);
  afterAll(async () => {
    await platform?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  it('prints the rollup as a table, one row per domain', async () => {
    const res = await runLdp(['dashboard', '--aggregator', agg.aggregatorId, '--refresh'], env);
    expect(res.stderr).toBe('');
    expect(res.code).toBe(0);
    const lines = res.stdout.trim().split('\n');
    expect(lines[0]).toMatch(new RegExp(`^Sahyog Foundation \\(${agg.aggregatorId}\\), computed at \\d{4}-`));
    expect(lines[2].split(/\s{2,}/).slice(0, 10)).toEqual(['domain', 'participants', 'live', 'draft', 'paused', 'retired', 'pending', 'bulk', 'link', 'uploads']);
    const { rows: [live] } = await platform.ctx.pool.query(
      `SELECT count(*) FILTER (WHERE lifecycle_status = 'live')::int AS live FROM aggregator.participants WHERE aggregator_id = $1`, [agg.aggregatorId]);
    const seeker = lines.find((l) => l.startsWith('seeker'))!.split(/\s+/);
    expect(seeker.slice(0, 3)).toEqual(['seeker', '120', String(live.live)]);
    expect(seeker.slice(7, 13)).toEqual(['120', '0', '1', '120', '0', '0']);
    expect(lines.find((l) => l.startsWith('provider'))!.split(/\s+/).slice(0, 2)).toEqual(['provider', '0']);
    const json = JSON.parse((await runLdp(['dashboard', '--aggregator', agg.aggregatorId, '--json'], env)).stdout);
    expect(json.by_domain.find((d: { domain: string }) => d.domain === 'seeker').participants.total).toBe(120);
  });

  it('writes the CSV of the aggregator’s listed participants only', async () => {
    const pool = platform.ctx.pool;
    const mine = (await pool.query('SELECT participant_id FROM aggregator.participants WHERE aggregator_id = $1 LIMIT 50', [agg.aggregatorId])).rows.map((r) => r.participant_id);
    const theirs = (await pool.query('SELECT participant_id FROM aggregator.participants WHERE aggregator_id = $1 LIMIT 10', [other.aggregatorId])).rows.map((r) => r.participant_id);
    const idsFile = path.join(dir, 'ids.txt');
    await writeFile(idsFile, `# participants to contact\n${[...mine, ...theirs].join('\n')}\n`);
    const out = path.join(dir, 'profiles.csv');
    const res = await runLdp(['export', '--aggregator', agg.aggregatorId, '--ids', idsFile, '--out', out], env);
    expect(res.code).toBe(0);
    expect(res.stderr).toContain(`exported 50 profiles to ${out}; 10 ids not this aggregator's`);
    const [header, ...rows] = parseCsv((await readFile(out, 'utf8')).replace(/^\uFEFF/, '')) as string[][];
    expect(header.slice(0, 3)).toEqual(['participant_id', 'domain', 'name']);
    expect(rows.map((r) => r[0])).toEqual(mine);
    expect(rows.every((r) => r[2].length > 0 && !r[2].startsWith('v1.'))).toBe(true);
    const { rows: [audit] } = await pool.query('SELECT * FROM aggregator.profile_exports WHERE aggregator_id = $1', [agg.aggregatorId]);
    expect(audit).toMatchObject({ exported_count: 50, absent_count: 10, exported_by: expect.stringMatching(/^cli:/) });

    const empty = path.join(dir, 'empty.txt');
    await writeFile(empty, '\n');
    const refused = await runLdp(['export', '--aggregator', agg.aggregatorId, '--ids', empty], env);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/must list 1\.\.1000 participant ids/);
  });
});
