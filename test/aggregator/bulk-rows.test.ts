import { createReadStream, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { matchHeaders, type ColumnMapping } from '../../lib/aggregator/bulk/header-match.ts';
import { createRowCoercer, type RowOutcome } from '../../lib/aggregator/bulk/row-coercion.ts';
import { openTable } from '../../lib/aggregator/bulk/open-table.ts';
import { TableFormatError } from '../../lib/aggregator/bulk/table.ts';
import { loadNetwork, type Domain, type Network } from '../../lib/network/config.ts';
import { absent, NEEDS_SHARED, titled } from '../helpers/requires.ts';

const repoRoot = fileURLToPath(new URL('../..', import.meta.url));
const sharedData = path.resolve(repoRoot, '../shared/data');
const HARYANA_PUNJAB = path.join(sharedData, 'pmgsy-schools-clinics-haryana-punjab/pmgsy_education_medical_haryana_punjab.csv');
const SOUTH_WEST = path.join(sharedData, 'pmgsy-rural-facilities/pmgsy_facilities_south_west_india.csv');
const pmgsyColumnMap = JSON.parse(readFileSync(path.join(repoRoot, 'fixtures/column-maps/pmgsy-facilities.json'), 'utf8')) as Record<string, string | null>;

let network: Network;
let seeker: Domain;
let provider: Domain;

beforeAll(async () => {
  network = await loadNetwork('local-discovery');
  seeker = network.domains.get('seeker')!;
  provider = network.domains.get('provider')!;
});

function formatError(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(TableFormatError);
    return (err as Error).message;
  }
  throw new Error('expected a TableFormatError');
}

/** Coerces one row given as header → cell. */
function coerce(domain: Domain, row: Record<string, string>, columnMap?: Record<string, string | null>): RowOutcome {
  const headers = Object.keys(row);
  return createRowCoercer(network, domain, matchHeaders(domain, headers, columnMap))(Object.values(row));
}

function errorsOf(outcome: RowOutcome): Record<string, string> {
  expect(outcome.ok).toBe(false);
  return outcome.ok ? {} : Object.fromEntries(outcome.errors.map((e) => [e.field, e.message]));
}

const SEEKER = { name: 'Priya Sharma', phone: '9876543210', state: 'Haryana' };

describe('header matching', () => {
  it('matches field names, labels and case/space/punctuation variants, and lists the rest as ignored', () => {
    const headers = ['FULL-NAME', 'Mobile number', 'E-mail', 'Highest education', 'expected monthly salary', 'VILLAGE OR TOWN', 'state', 'Lat', 'Lng', 'Notes', ''];
    const mapping = matchHeaders(seeker, headers);
    expect(mapping.columns).toEqual([
      { index: 0, header: 'FULL-NAME', field: 'name' },
      { index: 1, header: 'Mobile number', field: 'phone' },
      { index: 2, header: 'E-mail', field: 'email' },
      { index: 3, header: 'Highest education', field: 'education' },
      { index: 4, header: 'expected monthly salary', field: 'expected_monthly_salary' },
      { index: 5, header: 'VILLAGE OR TOWN', field: 'locality' },
      { index: 6, header: 'state', field: 'state' },
      { index: 7, header: 'Lat', field: 'latitude' },
      { index: 8, header: 'Lng', field: 'longitude' },
    ]);
    expect(mapping.ignored).toEqual(['Notes']);
    expect(mapping.unnamed).toEqual([10]);
    expect(mapping.width).toBe(11);
    for (const variant of ['Full Name', 'full_name', 'FULL-NAME', 'full name.', 'name']) {
      expect(matchHeaders(seeker, [variant, 'state', 'Mobile']).columns.map((c) => c.field)).toEqual(['name', 'state', 'phone']);
    }
    expect(matchHeaders(provider, ['Name', 'Category', 'District', 'State', 'longitude', 'latitude', 'External ID']).columns.map((c) => c.field))
      .toEqual(['name', 'category', 'district', 'state', 'longitude', 'latitude', 'external_id']);
  });

  it('lets column_map override, ignore (null) and rename columns, and refuses unknown fields and columns by name', () => {
    const headers = ['Facility ID', 'name', 'category', 'district_name', 'state_name', 'name_hi'];
    const mapping = matchHeaders(provider, headers, { 'Facility ID': 'external_id', district_name: 'district', STATE_NAME: 'state', name_hi: null });
    expect(mapping.columns.map((c) => [c.header, c.field])).toEqual([
      ['Facility ID', 'external_id'], ['name', 'name'], ['category', 'category'], ['district_name', 'district'], ['state_name', 'state'],
    ]);
    expect(mapping.ignored).toEqual(['name_hi']);
    // null also ignores a column that would have matched by itself.
    expect(matchHeaders(provider, [...headers, 'phone'], { district_name: 'district', state_name: 'state', phone: null }).ignored).toEqual(['Facility ID', 'name_hi', 'phone']);

    expect(formatError(() => matchHeaders(provider, headers, { district_name: 'district', state_name: 'region' })))
      .toMatch(/^column_map maps "state_name" to "region", which is not a field of provider participants \(fields: external_id, name, category/);
    expect(formatError(() => matchHeaders(provider, headers, { district_name: 'district', state_name: 'state', 'Facility No': 'external_id' })))
      .toMatch(/^column_map names the column "Facility No", which is not in the file's header row \("Facility ID", "name"/);
  });

  it('refuses two columns for one field, naming both', () => {
    expect(formatError(() => matchHeaders(seeker, ['name', 'phone', 'Mobile number', 'state'])))
      .toBe('the columns "phone" (column B) and "Mobile number" (column C) both map to the field phone; remove one of them, or map one to null in column_map');
    expect(formatError(() => matchHeaders(provider, ['name', 'category', 'district', 'district_name', 'state'], { district_name: 'district' })))
      .toMatch(/^the columns "district" \(column C\) and "district_name" \(column D\) both map to the field district/);
  });

  it('names the missing required columns, or says that no column is known', () => {
    expect(formatError(() => matchHeaders(provider, ['name', 'latitude', 'longitude'])))
      .toBe('required columns are missing: category (Category), district (District), state (State); add them, or map your own columns to them with column_map');
    expect(formatError(() => matchHeaders(seeker, ['Full name', 'phone'])))
      .toMatch(/^required column is missing: state \(State\)/);
    expect(formatError(() => matchHeaders(provider, ['facility', 'kind', 'where'])))
      .toMatch(/^none of the file's columns \("facility", "kind", "where"\) matches a field of provider participants; the header row must name the fields \(external_id, name, category/);
  });
});

describe('row coercion and validation', () => {
  it('types every field by the schema kind and fills identity, external id and location', () => {
    const outcome = coerce(provider, {
      'External ID': '733237', name: 'Govt Sr Secondary School Karora', category: 'education', services: ' vocational training | computer lab ||',
      phone: '01746-222333', email: 'Principal.Karora@Example.IN', locality: 'Karora', district: 'Kaithal', state: 'haryana',
      languages: 'hindi|PUNJABI', capacity: '1,200', latitude: '29.6573681', longitude: '76,5420837',
    });
    expect(outcome).toEqual({
      ok: true,
      participant: {
        profile: {
          external_id: '733237', name: 'Govt Sr Secondary School Karora', category: 'Education', services: ['vocational training', 'computer lab'],
          phone: '+911746222333', email: 'principal.karora@example.in', locality: 'Karora', district: 'Kaithal', state: 'Haryana',
          languages: ['Hindi', 'Punjabi'], capacity: 1200, latitude: 29.6573681, longitude: 76.5420837,
        },
        identity: { name: 'Govt Sr Secondary School Karora', phone: '+911746222333', email: 'principal.karora@example.in' },
        externalId: '733237',
        locations: [{ lat: 29.6573681, lng: 76.5420837 }],
      },
    });
  });

  it('leaves empty cells out, and gives no location without coordinates', () => {
    const outcome = coerce(seeker, { ...SEEKER, email: '', age: '', skills: ' | ', latitude: '', longitude: '' });
    expect(outcome).toEqual({ ok: true, participant: { profile: { name: 'Priya Sharma', phone: '+919876543210', state: 'Haryana' }, identity: { name: 'Priya Sharma', phone: '+919876543210' }, locations: [] } });
  });

  it('reads numbers with thousands grouping (also Indian) or one unambiguous decimal comma, and rejects the rest', () => {
    const salary = (text: string) => coerce(seeker, { ...SEEKER, expected_monthly_salary: text });
    const value = (text: string) => {
      const outcome = salary(text);
      return outcome.ok ? outcome.participant.profile.expected_monthly_salary : errorsOf(outcome).expected_monthly_salary;
    };
    expect(value('18000')).toBe(18000);
    expect(value('1,234.5')).toBe(1234.5);
    expect(value('1,23,456')).toBe(123456);
    expect(value('18000,50')).toBe(18000.5);
    expect(value('1.5e4')).toBe(15000);
    expect(value('.5')).toBe(0.5);
    for (const bad of ['12abc', '0x10', '1 234', '1,2,3', 'Infinity', '1,234,5', '₹18000']) {
      expect(value(bad)).toBe(`expected_monthly_salary must be a number (got ${JSON.stringify(bad)})`);
    }
  });

  it('reads integers only without a fraction, and booleans as true/false, yes/no, y/n, 1/0 in any case', () => {
    expect(coerce(seeker, { ...SEEKER, age: '24.0' })).toMatchObject({ ok: true, participant: { profile: { age: 24 } } });
    expect(errorsOf(coerce(seeker, { ...SEEKER, age: '24.5' })).age).toBe('age must be a whole number (got "24.5")');
    for (const [text, expected] of [['TRUE', true], ['yes', true], ['Y', true], ['1', true], ['false', false], ['No', false], ['n', false], ['0', false]] as const) {
      expect(coerce(seeker, { ...SEEKER, willing_to_relocate: text })).toMatchObject({ ok: true, participant: { profile: { willing_to_relocate: expected } } });
    }
    expect(errorsOf(coerce(seeker, { ...SEEKER, willing_to_relocate: 'maybe' })).willing_to_relocate)
      .toBe('willing_to_relocate must be yes or no (or true/false, 1/0; got "maybe")');
  });

  it('matches closed sets without case, spaces or punctuation and names the allowed values otherwise', () => {
    const ok = coerce(seeker, { ...SEEKER, state: 'tamilnadu', gender: 'Prefer not to say', education: 'HIGHER SECONDARY', preferred_job_type: 'full-time' });
    expect(ok).toMatchObject({ ok: true, participant: { profile: { state: 'Tamil Nadu', gender: 'prefer_not_to_say', education: 'higher_secondary', preferred_job_type: 'full_time' } } });
    expect(errorsOf(coerce(provider, { name: 'X', category: 'School', district: 'Kaithal', state: 'Haryana' })))
      .toEqual({ category: 'category must be one of Education, Medical, Transport/Admin, Agro (got "School")' });
    expect(errorsOf(coerce(seeker, { ...SEEKER, languages: 'Hindi|Klingon|Punjabi' })).languages)
      .toBe('languages must be one of Assamese, Bengali, English, Gujarati, Hindi, Kannada, Konkani, Malayalam, Marathi, Odia, Punjabi, Tamil, Telugu, Urdu (got "Klingon")');
  });

  it('normalises phones to E.164 with the network default region, and rejects invalid ones', () => {
    for (const text of ['9876543210', '+91 98765 43210', '098765-43210', '919876543210', '+91-98765-43210']) {
      expect(coerce(seeker, { ...SEEKER, phone: text })).toMatchObject({ ok: true, participant: { identity: { phone: '+919876543210' } } });
    }
    expect(coerce(seeker, { ...SEEKER, phone: '+1 415 555 2671' })).toMatchObject({ ok: true, participant: { identity: { phone: '+14155552671' } } });
    for (const text of ['12345', '5094011094', 'call me']) {
      expect(errorsOf(coerce(seeker, { ...SEEKER, phone: text })).phone).toBe(`phone must be a valid phone number, e.g. +919876543210 (got ${JSON.stringify(text)})`);
    }
  });

  it('lower-cases e-mail addresses and rejects malformed ones', () => {
    expect(coerce(seeker, { ...SEEKER, email: 'Priya.Sharma@Example.IN' })).toMatchObject({ ok: true, participant: { identity: { email: 'priya.sharma@example.in' }, profile: { email: 'priya.sharma@example.in' } } });
    expect(errorsOf(coerce(seeker, { ...SEEKER, email: 'priya@' })).email).toBe('email must be a valid e-mail address (got "priya@")');
  });

  it('reports every problem of a row together: coercion, schema rules, required fields, half locations, stray cells', () => {
    const headers = ['name', 'phone', 'age', 'skills', 'languages', 'latitude', 'state', 'district', ''];
    const coercer = createRowCoercer(network, seeker, matchHeaders(seeker, headers));
    const outcome = coercer(['', '12345', '13', 'welding|welding', 'Hindi|Hindi', '42.05', 'Haryana', 'x'.repeat(101), 'stray', 'extra']);
    expect(errorsOf(outcome)).toEqual({
      name: 'name is required',
      phone: 'phone must be a valid phone number, e.g. +919876543210 (got "12345")',
      age: 'age must be between 14 and 100 (got "13")',
      skills: 'skills must not repeat a value (repeated: "welding")',
      languages: 'languages must not repeat a value (repeated: "Hindi")',
      latitude: 'latitude must be between 6 and 37.5 (got "42.05")',
      longitude: 'longitude is required when latitude is given',
      district: `district must be at most 100 characters long (got "${'x'.repeat(60)}…")`,
      'column I': 'column I has no header, so its value "stray" would be lost; add a header or clear the cell',
      'column J': 'column J has no header, so its value "extra" would be lost; add a header or clear the cell',
    });
    expect(coercer(['Asha', '9876543210', '', '', '', '', 'Haryana', '', '', ''])).toMatchObject({ ok: true });
    expect(errorsOf(coerce(seeker, { ...SEEKER, skills: Array.from({ length: 21 }, (_, i) => `skill ${i}`).join('|') })).skills)
      .toBe('skills must have at most 20 values');
  });
});

// The real datasets live outside the repository (../shared); without them these tests cannot run.
const noData = absent([HARYANA_PUNJAB, SOUTH_WEST], NEEDS_SHARED);
describe.skipIf(noData !== '')(titled('real PMGSY facilities through the whole layer', noData), () => {
  /** Reads `file` through openTable → matchHeaders(column map fixture) → coercer, at most `limit` rows. */
  async function run(file: string, limit = Infinity) {
    const table = await openTable(async () => createReadStream(file), 'csv');
    const mapping: ColumnMapping = matchHeaders(provider, table.headers, pmgsyColumnMap);
    const coercer = createRowCoercer(network, provider, mapping);
    let passed = 0;
    const failed: { rowNumber: number; id: string; fields: string[] }[] = [];
    const byId = new Map<string, { rowNumber: number; outcome: RowOutcome }>();
    let count = 0;
    for await (const row of table.rows) {
      const outcome = coercer(row.values);
      if (outcome.ok) passed++;
      else failed.push({ rowNumber: row.rowNumber, id: row.values[0], fields: outcome.errors.map((e) => e.field) });
      if (['533521', '727121', '787366', '787380'].includes(row.values[0])) byId.set(row.values[0], { rowNumber: row.rowNumber, outcome });
      if (++count === limit) break;
    }
    table.close();
    return { table, mapping, passed, failed, byId };
  }

  it('onboards all 19,118 Haryana/Punjab rows (counts computed independently with Python\'s csv module)', async () => {
    const { table, mapping, passed, failed, byId } = await run(HARYANA_PUNJAB);
    expect(table.encoding).toBe('utf-8');
    expect(mapping.columns.map((c) => `${c.header}→${c.field}`)).toEqual([
      'facility_id→external_id', 'name→name', 'category→category', 'habitation_name→locality', 'block_name→block',
      'district_name→district', 'state_name→state', 'latitude→latitude', 'longitude→longitude',
    ]);
    expect(mapping.ignored).toEqual(['habitation_id', 'block_id', 'district_id', 'state_id']);
    expect({ passed, failed: failed.length }).toEqual({ passed: 19_118, failed: 0 });
    expect(byId.get('533521')).toEqual({
      rowNumber: expect.any(Number),
      outcome: {
        ok: true,
        participant: {
          profile: { external_id: '533521', name: 'ITI Women', category: 'Education', locality: 'Mohindergarh', block: 'Mohindergarh', district: 'Mohindergarh', state: 'Haryana', latitude: 28.2718987, longitude: 76.1440603 },
          identity: { name: 'ITI Women' }, externalId: '533521', locations: [{ lat: 28.2718987, lng: 76.1440603 }],
        },
      },
    });
  });

  it('reads a 215,000-row slice of the large file: the quoted newline, "Tamilnadu", and exactly the 4 rows located in the USA failing', async () => {
    const { passed, failed, byId } = await run(SOUTH_WEST, 215_000);
    expect({ passed, failed: failed.length }).toEqual({ passed: 214_996, failed: 4 });
    expect(failed).toEqual([
      { rowNumber: 108_526, id: '803167', fields: ['latitude', 'longitude'] },
      { rowNumber: 122_418, id: '759990', fields: ['latitude', 'longitude'] },
      { rowNumber: 131_299, id: '762708', fields: ['latitude', 'longitude'] },
      { rowNumber: 131_345, id: '760443', fields: ['latitude', 'longitude'] },
    ]);
    expect(byId.get('787366')).toMatchObject({ rowNumber: 212_849, outcome: { ok: true, participant: { profile: { name: 'Saint High school \r\nCoeducation', state: 'Tamil Nadu' } } } });
    expect(byId.get('787380')?.rowNumber).toBe(212_850);
  });
});
