/**
 * Linear-time input (issue 29, docs/decisions.md "Linear-time input"): a long value is refused by
 * its length before any parsing, and the number patterns do not backtrack, so one request cannot
 * freeze the process that runs every service. Through the public registration API (a 900,000-digit
 * age while the search service's /health must still answer), and through the row coercion, the
 * number parser and the mapping suggestions that bulk uploads, dry runs and /match use; and an
 * XLSX number format that would make exceljs's date check quadratic per cell is refused.
 */
import { Readable } from 'node:stream';
import ExcelJS from 'exceljs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openTable } from '../../lib/aggregator/bulk/open-table.ts';
import { TableFormatError } from '../../lib/aggregator/bulk/table.ts';
import { createRowCoercer, MAX_TOKEN_CHARS, parseNumber } from '../../lib/aggregator/bulk/row-coercion.ts';
import { matchHeaders } from '../../lib/aggregator/bulk/header-match.ts';
import { suggestMapping } from '../../lib/aggregator/bulk/suggest.ts';
import { loadNetwork, type Domain, type Network } from '../../lib/network/config.ts';
import { startTestPlatform, type TestAggregator, type TestPlatform } from '../helpers/platform.ts';

/** A cell as long as Excel allows (32,767 characters): digits that fail only at the last one. */
const LONG_CELL = `${'1'.repeat(32_766)}x`;
const SEEKER = { name: 'Priya Sharma', phone: '9876543210', state: 'Haryana' };

function timed<T>(fn: () => T): { value: T; ms: number } {
  const start = performance.now();
  const value = fn();
  return { value, ms: performance.now() - start };
}

describe('coercion of long cells (bulk rows, dry runs, /match)', () => {
  let network: Network;
  let seeker: Domain;
  beforeAll(async () => {
    network = await loadNetwork('local-discovery');
    seeker = network.domains.get('seeker')!;
  });

  const coerce = (row: Record<string, string>) =>
    createRowCoercer(network, seeker, matchHeaders(seeker, Object.keys(row)))(Object.values(row));
  /** Times the coercion alone (the coercer is compiled first). */
  const timedCoerce = (row: Record<string, string>) => {
    const coerceRow = createRowCoercer(network, seeker, matchHeaders(seeker, Object.keys(row)));
    coerceRow(Object.values({ ...row, ...Object.fromEntries(Object.keys(row).map((k) => [k, ''])), ...SEEKER }));
    return timed(() => coerceRow(Object.values(row)));
  };

  it('parses numbers in time linear in their length (no backtracking over a run of digits)', () => {
    for (const text of [`${'1'.repeat(50_000)}x`, `${'1'.repeat(25_000)}.${'1'.repeat(25_000)}x`, `.${'1'.repeat(50_000)}e`]) {
      const { value, ms } = timed(() => parseNumber(text));
      expect(value).toBeNull();
      expect(ms).toBeLessThan(50);
    }
    expect(['12', '-0.5', '1.', '.5', '1e3', '+2.5E-2', '1,234.5', '1,23,456', '29,657368'].map(parseNumber))
      .toEqual([12, -0.5, 1, 0.5, 1000, 0.025, 1234.5, 123456, 29.657368]);
    expect(['1.2.3', '1e', '.', '12abc', '0x10', '1 234'].map(parseNumber)).toEqual([null, null, null, null, null, null]);
  });

  it(`refuses a ${LONG_CELL.length.toLocaleString('en-US')}-character cell by its length, at once, naming the field`, () => {
    for (const [field, cell] of [['age', LONG_CELL], ['expected monthly salary', LONG_CELL], ['age', '1'.repeat(32_767)], ['state', LONG_CELL]] as const) {
      const { value, ms } = timedCoerce({ ...SEEKER, [field]: cell });
      expect(ms).toBeLessThan(50);
      expect(value.ok).toBe(false);
      const name = field === 'expected monthly salary' ? 'expected_monthly_salary' : field;
      const cap = field === 'state' ? expect.any(Number) : MAX_TOKEN_CHARS;
      expect(value.ok ? [] : value.errors).toEqual([{ field: name, message: expect.stringMatching(/^\S+ must be at most \d+ characters long \(got "1{60}…"\)$/) }]);
      expect(Number((value.ok ? [] : value.errors)[0].message.match(/at most (\d+)/)![1])).toEqual(cap);
    }
    // Values up to the cap are read as before; text fields keep the schema's maxLength (and message).
    const ok = coerce({ ...SEEKER, age: `${'0'.repeat(MAX_TOKEN_CHARS - 2)}24`, skills: 'wiring | solar' });
    expect(ok).toMatchObject({ ok: true, participant: { profile: { age: 24, skills: ['wiring', 'solar'] } } });
    const long = coerce({ ...SEEKER, name: 'a'.repeat(32_767), skills: `${'b'.repeat(61)} | wiring` });
    expect(long.ok ? [] : long.errors).toEqual([
      { field: 'name', message: `name must be at most 200 characters long (got "${'a'.repeat(60)}…")` },
      { field: 'skills', message: `each value of skills must be at most 60 characters long (got "${'b'.repeat(60)}…")` },
    ]);
  });

  it('suggests a mapping (/match) for sampled rows of long cells at once', () => {
    const sample = Array.from({ length: 3 }, () => ['Priya', LONG_CELL]);
    const { value, ms } = timed(() => suggestMapping(network, seeker, ['Name', 'Notes'], sample, null));
    expect(ms).toBeLessThan(100);
    expect(value.fields.find((f) => f.field === 'age')?.candidates).toEqual([]);
  });
});

describe('XLSX number formats', () => {
  async function workbook(format: string, rows = 200): Promise<Buffer> {
    const wb = new ExcelJS.Workbook();
    const ws = wb.addWorksheet('Participants');
    ws.addRow(['name', 'age', 'registered']);
    for (let i = 0; i < rows; i++) {
      const row = ws.addRow([`P${i}`, 20 + (i % 30), 45_000 + i]);
      row.getCell(2).numFmt = format;
      row.getCell(3).numFmt = '[$-409]d-mmm-yy;@';
    }
    return Buffer.from(await wb.xlsx.writeBuffer());
  }
  async function readAll(bytes: Buffer): Promise<string[][]> {
    const table = await openTable(async () => Readable.from([bytes]), 'xlsx');
    const rows: string[][] = [];
    for await (const row of table.rows) rows.push(row.values);
    return rows;
  }

  it('refuses a format of unclosed "[" (quadratic per numeric cell in exceljs) before reading a row', async () => {
    const bytes = await workbook('['.repeat(5_000));
    const start = performance.now();
    const error = await readAll(bytes).then(() => null, (err: unknown) => err);
    expect(performance.now() - start).toBeLessThan(1000);
    expect(error).toBeInstanceOf(TableFormatError);
    expect((error as Error).message).toMatch(/^the XLSX workbook has a number format \(id \d+, "\[{40}"…, 5000 characters\) that Excel does not write: .*save it as CSV$/);
    await expect(readAll(await workbook('[[h]:mm'))).rejects.toThrow(/with "\[" inside "\[…\]"/);
  });

  it('reads the bracketed formats Excel writes (colours, locales, elapsed time)', async () => {
    for (const format of ['[Red]0.00;[Blue]-0.00', '[>=100]0;0.0', '0 "[units]"']) {
      expect((await readAll(await workbook(format, 2)))[0]).toEqual(['P0', '20', '2023-03-15']);
    }
    expect((await readAll(await workbook('[h]:mm', 1)))[0][1]).toMatch(/^1900-01-19/);
  });
});

describe('a public registration with a 900,000-digit value', () => {
  let platform: TestPlatform;
  let agg: TestAggregator;
  beforeAll(async () => {
    platform = await startTestPlatform({ env: { EMBEDDING_PROVIDER: 'hashing' } });
    agg = await platform.aggregator({ types: ['seeker'] });
  });
  afterAll(() => platform?.stop());

  it('answers 400 naming the field at once, while the other services of the process keep answering', async () => {
    const aggregator = platform.url('aggregator');
    const created = await fetch(`${aggregator}/v1/links/create`, {
      method: 'POST', headers: { authorization: `Bearer ${agg.token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ domain: 'seeker', status: 'live' }),
    });
    expect(created.status).toBe(201);
    const { slug } = await created.json() as { slug: string };
    const body = JSON.stringify({ ...SEEKER, age: `${'1'.repeat(900_000)}x` });
    expect(body.length).toBeLessThan(platform.config.HTTP_BODY_LIMIT);

    const sent = performance.now();
    const registration = fetch(`${aggregator}/public/v1/aggregators/${agg.orgSlug}/registrations/${slug}`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body,
    }).then(async (res) => ({ status: res.status, body: await res.json() as any, ms: performance.now() - sent }));
    // Asked once the registration is being handled. Timed from when it was due, not from when the
    // timer fired: a frozen process delays the timer too.
    const HEALTH_AFTER_MS = 100;
    const health = new Promise((resolve) => setTimeout(resolve, HEALTH_AFTER_MS))
      .then(() => fetch(`${platform.url('search')}/health`))
      .then((res) => ({ status: res.status, ms: performance.now() - sent - HEALTH_AFTER_MS }));

    const [reg, live] = await Promise.all([registration, health]);
    expect(live.status).toBe(200);
    expect(live.ms).toBeLessThan(200);
    expect(reg.status).toBe(400);
    expect(reg.ms).toBeLessThan(1000);
    expect(Object.keys(reg.body.error.fields)).toEqual(['age']);
    expect(reg.body.error.fields.age[0]).toMatch(/^age must be at most 40 characters long/);
  });

  it('answers a request path of 15,000 slashes at once (the trailing-slash strip is linear)', async () => {
    const start = performance.now();
    const res = await fetch(`${platform.url('search')}${'/'.repeat(15_000)}x`);
    expect(res.status).toBe(404);
    expect(performance.now() - start).toBeLessThan(300);
  });
});
