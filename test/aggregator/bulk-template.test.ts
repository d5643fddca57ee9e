import { Readable } from 'node:stream';
import ExcelJS from 'exceljs';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { matchHeaders } from '../../lib/aggregator/bulk/header-match.ts';
import { createRowCoercer, type RowOutcome } from '../../lib/aggregator/bulk/row-coercion.ts';
import { openTable } from '../../lib/aggregator/bulk/open-table.ts';
import { type TableFormat } from '../../lib/aggregator/bulk/table.ts';
import { startTestPlatform, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';

let platform: TestPlatform;
let both: TestAggregator;
let providerOnly: TestAggregator;

beforeAll(async () => {
  platform = await startTestPlatform({ services: ['aggregator'] });
  both = await platform.aggregator({ types: ['seeker', 'provider'] });
  providerOnly = await platform.aggregator({ types: ['provider'] });
});
afterAll(() => platform.stop());

function template(token: string, query: Record<string, string>) {
  return request(platform.url('aggregator')).get('/v1/bulk-uploads/template').query(query).set('authorization', `Bearer ${token}`)
    .buffer(true).parse((res, done) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => done(null, Buffer.concat(chunks)));
    });
}

/** Reads `bytes` through the whole upload layer (openTable → matchHeaders → coercer) for `domainName`. */
async function readBack(bytes: Buffer, format: TableFormat, domainName: string) {
  const { network } = platform.ctx;
  const domain = network.domains.get(domainName)!;
  const table = await openTable(async () => Readable.from([bytes]), format);
  const coerce = createRowCoercer(network, domain, matchHeaders(domain, table.headers));
  const outcomes: { rowNumber: number; outcome: RowOutcome }[] = [];
  for await (const row of table.rows) outcomes.push({ rowNumber: row.rowNumber, outcome: coerce(row.values) });
  return { table, outcomes };
}

async function loadWorkbook(bytes: Buffer): Promise<ExcelJS.Workbook> {
  const workbook = new ExcelJS.Workbook();
  await workbook.xlsx.load(bytes as unknown as ExcelJS.Buffer);
  return workbook;
}

describe('GET /v1/bulk-uploads/template', () => {
  it('answers a CSV attachment: header row of field names plus one example row, formula-safe', async () => {
    const res = await template(providerOnly.token, {});
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toBe('text/csv; charset=utf-8');
    expect(res.headers['content-disposition']).toBe('attachment; filename="local-discovery-provider-template.csv"');
    const text = (res.body as Buffer).toString('utf8');
    expect(text).toBe('\uFEFFexternal_id,name,category,services,phone,email,locality,block,district,state,languages,capacity,latitude,longitude\r\n'
      + '733237,Govt Sr Secondary School Karora,Education,vocational training|computer lab,+911746222333,principal.karora@example.in,Karora,Rajound,Kaithal,Haryana,Hindi|Punjabi,400,29.6573681,76.5420837\r\n');

    const seeker = await template(both.token, { participant_type: 'seeker', format: 'csv' });
    expect(seeker.status).toBe(200);
    expect(seeker.headers['content-disposition']).toBe('attachment; filename="local-discovery-seeker-template.csv"');
    const [header, example, rest] = (seeker.body as Buffer).toString('utf8').split('\r\n');
    expect(header).toBe('\uFEFFname,phone,email,gender,age,education,skills,languages,experience_years,expected_monthly_salary,preferred_job_type,willing_to_relocate,locality,district,state,latitude,longitude');
    expect(example).toBe('Priya Sharma,+919876543210,priya.sharma@example.in,female,24,iti,electrician|solar panel installation,Hindi|Punjabi,3,18000,full_time,no,Karora,Kaithal,Haryana,29.6573681,76.5420837');
    expect(rest).toBe('');
  });

  it('answers 400 naming the field for an unknown participant_type or format, or when the type is ambiguous', async () => {
    const unknownType = await template(both.token, { participant_type: 'volunteer' });
    expect(unknownType.status).toBe(400);
    const body = JSON.parse((unknownType.body as Buffer).toString('utf8'));
    expect(body.error).toMatchObject({ code: 'invalid_request', fields: { participant_type: ['must be one of seeker, provider'] } });
    expect(body.error.requestId).toEqual(expect.any(String));

    const unknownFormat = await template(both.token, { participant_type: 'seeker', format: 'xls' });
    expect(unknownFormat.status).toBe(400);
    expect(JSON.parse((unknownFormat.body as Buffer).toString('utf8')).error.fields).toEqual({ format: ['must be csv or xlsx'] });

    const ambiguous = await template(both.token, { format: 'xlsx' });
    expect(ambiguous.status).toBe(400);
    expect(JSON.parse((ambiguous.body as Buffer).toString('utf8')).error).toMatchObject({
      detail: 'Invalid query: participant_type is required, as this aggregator may onboard seeker and provider participants',
      fields: { participant_type: ['required: one of seeker, provider'] },
    });
  });

  it('answers 403 when the caller\'s aggregator type may not onboard that participant type, 401 without a token', async () => {
    const res = await template(providerOnly.token, { participant_type: 'seeker', format: 'xlsx' });
    expect(res.status).toBe(403);
    expect(JSON.parse((res.body as Buffer).toString('utf8')).error.code).toBe('domain_not_allowed');
    const anonymous = await request(platform.url('aggregator')).get('/v1/bulk-uploads/template');
    expect(anonymous.status).toBe(401);
  });

  it('answers an XLSX workbook of four tabs: instructions, allowed values, sample rows and the grid with dropdowns', async () => {
    const res = await template(both.token, { participant_type: 'seeker', format: 'xlsx' });
    expect(res.status).toBe(200);
    expect(res.headers['content-type']).toBe('application/vnd.openxmlformats-officedocument.spreadsheetml.sheet');
    expect(res.headers['content-disposition']).toBe('attachment; filename="local-discovery-seeker-template.xlsx"');
    const workbook = await loadWorkbook(res.body);
    expect(workbook.worksheets.map((w) => w.name)).toEqual(['Instructions', 'Allowed values', 'Sample rows', 'Participants']);
    const fields = platform.ctx.network.domains.get('seeker')!.fields.map((f) => f.name);

    const instructions = workbook.getWorksheet('Instructions')!;
    const rows = instructions.getSheetValues().filter((r): r is ExcelJS.CellValue[] => Array.isArray(r)).map((r) => r.slice(1));
    const phone = rows.find((r) => r[0] === 'phone')!;
    expect(phone[2]).toBe('yes');
    expect(phone[3]).toMatch(/^Phone number/);
    expect(rows.find((r) => r[0] === 'skills')![3]).toMatch(/several values are separated by \|/);
    expect(rows.some((r) => String(r[0] ?? '').includes('separate them with |'))).toBe(true);

    const allowed = workbook.getWorksheet('Allowed values')!;
    expect(allowed.getRow(1).values).toEqual([undefined, 'gender', 'education', 'languages', 'preferred_job_type', 'willing_to_relocate', 'state']);
    expect(allowed.getColumn(1).values.slice(2)).toEqual(['female', 'male', 'other', 'prefer_not_to_say']);
    expect(allowed.getColumn(5).values.slice(2)).toEqual(['yes', 'no']);
    expect(allowed.getColumn(6).values).toHaveLength(2 + 36);

    const samples = workbook.getWorksheet('Sample rows')!;
    expect(samples.getRow(1).values).toEqual([undefined, ...fields]);
    expect(samples.actualRowCount).toBe(6);

    const grid = workbook.getWorksheet('Participants')!;
    expect(grid.getRow(1).values).toEqual([undefined, ...fields]);
    expect(grid.actualRowCount).toBe(1);
    const nameHeader = grid.getCell('A1');
    expect(nameHeader.font?.bold).toBe(true);
    expect((nameHeader.fill as ExcelJS.FillPattern).fgColor?.argb).toBe('FFFFF2CC');
    expect(String(nameHeader.note)).toMatch(/^Full name \(required\)/);
    expect((grid.getCell('C1').fill as ExcelJS.FillPattern).fgColor?.argb).not.toBe('FFFFF2CC');
    const validations = (grid as unknown as { dataValidations: { model: Record<string, ExcelJS.DataValidation> } }).dataValidations.model;
    for (const address of ['D2', 'D10001']) {
      expect(validations[address]).toMatchObject({ type: 'list', formulae: ["'Allowed values'!$A$2:$A$5"], errorStyle: 'stop' });
    }
    expect(validations.D10002).toBeUndefined();
    expect(validations.H2).toMatchObject({ type: 'list', formulae: ["'Allowed values'!$C$2:$C$15"], errorStyle: 'information' });
    expect(validations.L2).toMatchObject({ type: 'list', formulae: ["'Allowed values'!$E$2:$E$3"] });
    expect(validations.O2).toMatchObject({ type: 'list', formulae: ["'Allowed values'!$F$2:$F$37"] });
    expect(validations.P2).toMatchObject({ type: 'decimal', operator: 'between', formulae: [6, 37.5] });
    expect(validations.E2).toMatchObject({ type: 'whole', formulae: [14, 100] });
    expect(validations.A2).toBeUndefined();
  });
});

describe('template round trip through the upload layer', () => {
  it('CSV: the downloaded template with rows added as text reads back as valid participants', async () => {
    const res = await template(providerOnly.token, { participant_type: 'provider' });
    const filled = Buffer.concat([res.body as Buffer, Buffer.from(
      'PB-0001,"Primary Health Centre, Ghudda",medical,outpatient care|immunisation,0164-2245678,PHC.Ghudda@Example.org,Ghudda,Sangat,Bathinda,Punjab,Punjabi,30,30.1563204,74.8687112\r\n'
      + ',Bus stand Jupadu,Transport/Admin,,,,,,Kurnool,Andhra Pradesh,,,,\r\n',
    )]);
    const { table, outcomes } = await readBack(filled, 'csv', 'provider');
    expect(table.encoding).toBe('utf-8');
    expect(outcomes.map((o) => [o.rowNumber, o.outcome.ok])).toEqual([[2, true], [3, true], [4, true]]);
    expect(outcomes[1].outcome).toMatchObject({
      ok: true,
      participant: {
        profile: { name: 'Primary Health Centre, Ghudda', category: 'Medical', services: ['outpatient care', 'immunisation'], capacity: 30 },
        identity: { phone: '+911642245678', email: 'phc.ghudda@example.org' }, externalId: 'PB-0001',
        locations: [{ lat: 30.1563204, lng: 74.8687112 }],
      },
    });
  });

  it('XLSX: the template filled in its grid (typed cells) reads back from the grid tab as valid participants', async () => {
    const res = await template(both.token, { participant_type: 'seeker', format: 'xlsx' });
    const workbook = await loadWorkbook(res.body);
    const grid = workbook.getWorksheet('Participants')!;
    const fields = platform.ctx.network.domains.get('seeker')!.fields.map((f) => f.name);
    const row = (values: Record<string, unknown>) => grid.addRow(fields.map((f) => values[f] ?? null));
    row({ name: 'Asha Kumari', phone: 9876543211, gender: 'female', age: 21, skills: 'tailoring|embroidery', languages: 'Hindi', state: 'Haryana', district: 'Kaithal', willing_to_relocate: 'yes' });
    row({ name: 'Ravi Teja', phone: '+91 90000 00105', email: 'Ravi.Teja@Example.org', education: 'ITI', experience_years: { formula: '1+1', result: 2 }, state: 'Telangana', latitude: 17.385, longitude: 78.4867 });
    row({ name: 'No Phone', state: 'Punjab', age: 9 });
    const filled = Buffer.from(await workbook.xlsx.writeBuffer());

    const { table, outcomes } = await readBack(filled, 'xlsx', 'seeker');
    expect(table.sheet).toBe('Participants');
    expect(outcomes.map((o) => [o.rowNumber, o.outcome.ok])).toEqual([[2, true], [3, true], [4, false]]);
    expect(outcomes[0].outcome).toMatchObject({ ok: true, participant: { profile: { phone: '+919876543211', age: 21, skills: ['tailoring', 'embroidery'], willing_to_relocate: true } } });
    expect(outcomes[1].outcome).toMatchObject({
      ok: true,
      participant: { profile: { education: 'iti', experience_years: 2 }, identity: { email: 'ravi.teja@example.org' }, locations: [{ lat: 17.385, lng: 78.4867 }] },
    });
    expect(outcomes[2].outcome).toEqual({ ok: false, errors: [{ field: 'phone', message: 'phone is required' }, { field: 'age', message: 'age must be between 14 and 100 (got "9")' }] });
  });

  it('XLSX: every worked sample row is a valid participant', async () => {
    for (const domain of ['seeker', 'provider']) {
      const res = await template(both.token, { participant_type: domain, format: 'xlsx' });
      const workbook = await loadWorkbook(res.body);
      // Upload the samples tab alone, as an operator copying it out would.
      workbook.removeWorksheet(workbook.getWorksheet('Participants')!.id);
      workbook.removeWorksheet(workbook.getWorksheet('Instructions')!.id);
      workbook.removeWorksheet(workbook.getWorksheet('Allowed values')!.id);
      const { table, outcomes } = await readBack(Buffer.from(await workbook.xlsx.writeBuffer()), 'xlsx', domain);
      expect(table.sheet).toBe('Sample rows');
      expect(outcomes).toHaveLength(5);
      expect(outcomes.filter((o) => !o.outcome.ok)).toEqual([]);
    }
  });
});
