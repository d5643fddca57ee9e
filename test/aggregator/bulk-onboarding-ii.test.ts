/**
 * Bulk onboarding II as a new user would go (issue 17, "Done when"), with a real graphile-worker
 * runner: a spreadsheet with foreign headers, no column for the required `state`, coded
 * categories and a multi-valued column is onboarded with a saved mapping using a constant, a
 * value map and a split — after a dry run of its first 200 rows that shows the very outcomes the
 * real run then gives. Also: the dry run writes nothing and leaves the job pending; `ldp upload
 * --dry-run` prints the outcomes.
 */
import path from 'node:path';
import { rm, writeFile } from 'node:fs/promises';
import { parse } from 'csv-parse/sync';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { csv, errorReport, itemsOf, participantsOf, waitForJob } from '../helpers/bulk-upload.ts';
import { runLdp } from '../helpers/cli.ts';
import { startTestPlatform, tempDir, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';

let platform: TestPlatform;
let agg: TestAggregator;
let dir: string;

const HEADER = ['UNITID', 'INSTNM', 'SECTOR', 'PROGRAMS', 'CNTY', 'WEBADDR'];
const CODES = ['1', '2', '3', '4'];
/** 250 institutions; every 50th (row 7, 57, …) has the code 7, which the first mapping lacks; row 102 repeats UNITID U10. */
const ROWS = Array.from({ length: 250 }, (_, i) => [
  i === 100 ? 'U10' : `U${i}`, `Institution ${i}`, i % 50 === 5 ? ' 7 ' : CODES[i % 4], i % 3 === 0 ? 'reading; maths ;art' : 'first aid',
  i % 2 ? 'Ernakulam' : 'Kottayam', `https://example.org/${i}`,
]);
const FILE = csv(HEADER, ROWS);
const MAPPING_V1 = {
  UNITID: 'external_id',
  INSTNM: 'name',
  CNTY: 'district',
  category: { column: 'SECTOR', map: { 1: 'Education', 2: 'Medical', 3: 'Transport/Admin', 4: 'Agro' } },
  services: { column: 'PROGRAMS', split: ';' },
  state: { value: 'Kerala' },
};

const api = (method: 'get' | 'post' | 'put', url: string) =>
  request(platform.url('aggregator'))[method](url).set('authorization', `Bearer ${agg.token}`);

async function createWith(mappingId: string, file = FILE) {
  const res = await api('post', '/v1/bulk-uploads').field('participant_type', 'provider').field('mapping_id', mappingId).attach('file', file, 'institutions.csv');
  expect(res.status).toBe(201);
  return res.body.upload_id as string;
}

beforeAll(async () => {
  platform = await startTestPlatform({ worker: true, env: { BULK_UPLOAD_CHUNK_ROWS: '40' } });
  agg = await platform.aggregator({ types: ['provider'], roles: ['operator'] });
  dir = await tempDir('ldp-bulk-ii-');
});
afterAll(async () => {
  await platform.stop();
  await rm(dir, { recursive: true, force: true });
});

describe('a foreign spreadsheet, a saved mapping, a dry run, the real run', () => {
  it('onboards with the outcomes the dry run showed', async () => {
    // Institution U5 is already registered with this aggregator.
    const saved = await api('post', '/v1/bulk-uploads/mappings').send({ name: 'institutions', participant_type: 'provider', mapping: MAPPING_V1 });
    expect(saved.status).toBe(201);
    const mappingId = saved.body.id;
    const earlier = await createWith(mappingId, csv(HEADER, [ROWS[5].map((c, i) => (i === 2 ? '1' : c))]));
    await api('post', `/v1/bulk-uploads/${earlier}/start`).send({ attestation: true });
    expect(await waitForJob(platform, agg.token, earlier)).toMatchObject({ status: 'completed', passed: 1 });

    // First try: the dry run shows the code 7 is not mapped.
    const first = await createWith(mappingId);
    const dry1 = await api('post', `/v1/bulk-uploads/${first}/preview`).send({ rows: 200 });
    expect(dry1.status).toBe(200);
    expect(dry1.body).toMatchObject({ status: 'completed', rows_read: 200, file_problem: null, ignored_columns: ['WEBADDR'] });
    const unmapped = dry1.body.rows.filter((r: any) => r.outcome === 'failed');
    expect(unmapped.map((r: any) => r.row_number)).toEqual([7, 57, 107, 157]);
    expect(unmapped[0].errors).toEqual([{ field: 'category', message: 'category has no mapping for the value "7" of column SECTOR; mapped values are "1", "2", "3", "4"' }]);
    expect((await api('get', `/v1/bulk-uploads/${first}`)).body.status).toBe('pending');

    // The operator maps the code 7 too (a new version) and uploads again.
    const v2 = await api('put', `/v1/bulk-uploads/mappings/${mappingId}`)
      .send({ mapping: { ...MAPPING_V1, category: { ...MAPPING_V1.category, map: { ...MAPPING_V1.category.map, 7: 'Education' } } } });
    expect(v2.body.version).toBe(2);
    const uploadId = await createWith(mappingId);
    const dry = await api('post', `/v1/bulk-uploads/${uploadId}/preview`).send({ rows: 200 });
    expect(dry.status).toBe(200);
    expect(dry.body.counts).toEqual({ passed: 198, failed: 0, skipped: 2 });
    expect(dry.body.rows.filter((r: any) => r.outcome !== 'passed')).toEqual([
      { row_number: 7, outcome: 'skipped', errors: [{ field: 'external_id', message: 'external_id already registered with this aggregator' }] },
      { row_number: 102, outcome: 'skipped', errors: [{ field: 'external_id', message: 'external_id repeats row 12 of this file' }] },
    ]);
    expect(dry.body.rows[0]).toEqual({
      row_number: 2, outcome: 'passed', errors: [],
      values: { external_id: 'U0', name: 'Institution 0', district: 'Kottayam', category: 'Education', services: ['reading', 'maths', 'art'], state: 'Kerala' },
    });
    // Nothing written, nothing pushed, the job still pending.
    expect(await participantsOf(platform, agg.aggregatorId)).toHaveLength(1);
    expect(await itemsOf(platform, agg.aggregatorId)).toHaveLength(1);
    expect((await api('get', `/v1/bulk-uploads/${uploadId}`)).body).toMatchObject({ status: 'pending', mapping_id: mappingId, mapping_version: 2 });
    const again = await api('get', `/v1/bulk-uploads/${uploadId}/previews/${dry.body.preview_id}`);
    expect(again.body).toEqual(dry.body);

    // The real run.
    const started = await api('post', `/v1/bulk-uploads/${uploadId}/start`).send({ attestation: true });
    expect(started.status).toBe(200);
    const job = await waitForJob(platform, agg.token, uploadId);
    expect(job).toMatchObject({ status: 'completed', total_rows: 250, passed: 248, failed: 0, skipped: 2 });
    const participants = (await participantsOf(platform, agg.aggregatorId)).filter((p: any) => p.bulk_upload_id === uploadId);
    const report = parse((await errorReport(platform, agg.token, uploadId)).body, { columns: true, bom: true }) as Record<string, string>[];
    const real = new Map<number, { outcome: string; errors: string }>();
    for (const p of participants) real.set(p.row_number, { outcome: 'passed', errors: '' });
    for (const r of report) real.set(Number(r.row_number), { outcome: r.outcome, errors: r.error_messages });
    for (const row of dry.body.rows) {
      expect(real.get(row.row_number), `row ${row.row_number}`).toEqual({ outcome: row.outcome, errors: row.errors.map((e: any) => e.message).join('; ') });
    }
    const stored = participants.find((p: any) => p.row_number === 2);
    expect(stored.profile).toMatchObject({ category: 'Education', services: ['reading', 'maths', 'art'], state: 'Kerala', district: 'Kottayam' });
    const seventh = participants.find((p: any) => p.row_number === 57);
    expect(seventh.profile.category).toBe('Education');
  });

  it('refuses a dry run of a job that is not pending, or of more than 1000 rows', async () => {
    const saved = await api('post', '/v1/bulk-uploads/mappings').send({ name: 'x', participant_type: 'provider', mapping: MAPPING_V1 });
    const uploadId = await createWith(saved.body.id);
    const tooMany = await api('post', `/v1/bulk-uploads/${uploadId}/preview`).send({ rows: 1001 });
    expect(tooMany.status).toBe(400);
    expect(Object.keys(tooMany.body.error.fields)).toEqual(['rows']);
    const { rows: [job] } = await platform.ctx.pool.query(`UPDATE aggregator.bulk_uploads SET status = 'failed' WHERE upload_id = $1 RETURNING status`, [uploadId]);
    expect(job.status).toBe('failed');
    const notPending = await api('post', `/v1/bulk-uploads/${uploadId}/preview`).send({});
    expect(notPending.status).toBe(409);
  });

  it('reports a file-level problem the real run would fail with', async () => {
    const saved = await api('post', '/v1/bulk-uploads/mappings').send({ name: 'y', participant_type: 'provider', mapping: { ...MAPPING_V1, CNTY: null, district: { column: 'COUNTY' } } });
    const uploadId = await createWith(saved.body.id);
    const dry = await api('post', `/v1/bulk-uploads/${uploadId}/preview`).send({ rows: 5 });
    expect(dry.body).toMatchObject({ status: 'completed', rows_read: 0, file_problem: expect.stringMatching(/the mapping of district names the column "COUNTY"/) });
  });
});

describe('ldp upload --dry-run and ldp mapping', () => {
  it('saves a mapping, then prints the outcomes of the first rows as a table', async () => {
    const fresh = await platform.aggregator({ types: ['provider'], roles: ['operator'] });
    const env = { DATA_DIR: platform.dataDir, LDP_TOKEN: fresh.token };
    const url = ['--url', platform.url('aggregator')];
    const mappingFile = path.join(dir, 'mapping.json');
    await writeFile(mappingFile, JSON.stringify(MAPPING_V1));
    const save = await runLdp(['mapping', 'save', mappingFile, '--name', 'cli institutions', '--type', 'provider', ...url], env);
    expect(save.code, save.stderr).toBe(0);
    const id = /saved mapping ([0-9a-f-]{36}) version 1 \(provider: cli institutions\)/.exec(save.stdout)![1];
    const list = await runLdp(['mapping', 'list', ...url], env);
    expect(list.stdout).toMatch(new RegExp(`${id}\\s+1\\s+provider\\s+cli institutions`));
    const show = await runLdp(['mapping', 'show', id, ...url], env);
    expect(JSON.parse(show.stdout)).toMatchObject({ id, version: 1, mapping: MAPPING_V1 });

    const file = path.join(dir, 'institutions.csv');
    await writeFile(file, FILE);
    const dry = await runLdp(['upload', file, '--type', 'provider', '--mapping', id, '--dry-run', '--rows', '10', ...url], env);
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stdout).toMatch(/dry run of bulk upload [0-9a-f-]{36} \(institutions\.csv\): first 10 data rows; nothing was written/);
    expect(dry.stdout).toMatch(/^\s*7 {2}failed {3}category has no mapping for the value "7" of column SECTOR/m);
    expect(dry.stdout).toMatch(/^\s*2 {2}passed$/m);
    expect(await participantsOf(platform, fresh.aggregatorId)).toEqual([]);
    expect(dry.stdout).toContain('would be: 9 passed, 1 failed, 0 skipped');
  });
});
