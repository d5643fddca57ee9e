/**
 * The bad-file corpus (test/fixtures/bad-files/generate.ts) uploaded through the aggregator's API
 * and onboarded by a real worker (issue 15): each file is refused (4xx, shape C), fails its job, or
 * completes with the rows it can — always with a reason a person can act on, never a runtime
 * error's text — and the worker then onboards a good file as usual.
 */
import { readFile, rm } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Readable } from 'node:stream';
import { openTable } from '../../lib/aggregator/bulk/open-table.ts';
import { DEFAULT_TABLE_LIMITS, TableFormatError } from '../../lib/aggregator/bulk/table.ts';
import { generateBadFiles, type BadFile } from '../fixtures/bad-files/generate.ts';
import { createUpload, csv, errorReport, onboard, startUpload, waitForJob } from '../helpers/bulk-upload.ts';
import { startTestPlatform, tempDir, type TestPlatform } from '../helpers/platform.ts';

/** What a reason must never look like: the text of a JavaScript or system error. */
const RUNTIME_TEXT = /Cannot read prop|undefined|TypeError|RangeError|is not a function|ENOENT|EMFILE|\.ts:\d+|\bat [\w.]+ \(/;

let platform: TestPlatform;
let dir: string;
let files: BadFile[];

beforeAll(async () => {
  dir = await tempDir('ldp-bad-files-');
  files = await generateBadFiles(dir);
  platform = await startTestPlatform({ worker: true });
}, 120_000);
afterAll(async () => {
  await platform?.stop();
  await rm(dir, { recursive: true, force: true });
});

describe('the bad-file corpus', () => {
  it('covers every kind of file the issue lists', () => {
    expect(files.map((f) => f.filename)).toEqual(expect.arrayContaining([
      'empty.csv', 'bom-only.csv', 'header-only.csv', 'utf16le-bom.csv', 'utf16le.csv', 'utf16be-bom.csv', 'utf16be.csv', 'windows-1252.csv',
      'mixed-eol.csv', 'nul.csv', 'big-cell.csv', 'wide.csv', 'blank-rows.csv', 'duplicate-headers.csv', 'blank-header.csv', 'formulas.csv',
      'no-styles.xlsx', 'inline-strings.xlsx', 'zip-bomb.xlsx', 'truncated.xlsx', 'protected.xlsx', 'old.xlsx', 'macros.xlsm', 'csv-in-disguise.xlsx',
    ]));
  });

  it('each file is refused, fails, or completes with a reason a person can act on', async () => {
    for (const f of files) {
      const agg = await platform.aggregator({ types: ['seeker'] });
      const created = await createUpload(platform, agg.token, { participantType: 'seeker', file: await readFile(f.file), filename: f.filename });
      if (f.expect.kind === 'refused') {
        expect(created.status, f.title).toBe(f.expect.status);
        expect(created.body.error, f.title).toMatchObject({ code: expect.any(String), detail: expect.stringMatching(f.expect.reason), requestId: expect.any(String) });
        expect(created.body.error.detail, f.title).not.toMatch(RUNTIME_TEXT);
        continue;
      }
      expect(created.status, `${f.title}: ${JSON.stringify(created.body)}`).toBe(201);
      expect((await startUpload(platform, agg.token, created.body.upload_id)).status, f.title).toBe(200);
      const job = await waitForJob(platform, agg.token, created.body.upload_id, 120_000);
      if (f.expect.kind === 'failed') {
        expect(job.status, `${f.title}: ${job.status_reason}`).toBe('failed');
        expect(job.status_reason, f.title).toMatch(f.expect.reason);
        expect(job.status_reason, f.title).not.toMatch(RUNTIME_TEXT);
        continue;
      }
      expect(job, `${f.title}: ${job.status_reason}`).toMatchObject({ status: 'completed', passed: f.expect.passed, failed: f.expect.failed });
      if (job.failed + job.skipped > 0) {
        const report = await errorReport(platform, agg.token, job.upload_id);
        expect(report.status, f.title).toBe(200);
        expect(report.body, f.title).not.toMatch(RUNTIME_TEXT);
        if (f.expect.reason) expect(report.body, f.title).toMatch(f.expect.reason);
        // Every failed row says why (the error_messages column is not empty).
        const rows = (report.body as string).replace(/^\uFEFF/, '').trim().split('\r\n').slice(1);
        for (const row of rows) expect(row, f.title).toMatch(/^\d+,(failed|skipped),[^,]+,("[^"]+"|[^,]+)/);
        if (f.filename === 'formulas.csv') expect(report.body).toContain(`"'=HYPERLINK(""http://x.test"",""click"")"`);
      }
    }
  }, 600_000);

  it('the worker still onboards a good file afterwards, and names decode as written', async () => {
    const agg = await platform.aggregator({ types: ['seeker'] });
    const job = await onboard(platform, agg.token, { file: csv(['name', 'phone', 'state'], [['Zoë Fernandes', '9876501299', 'Goa']]) });
    expect(job).toMatchObject({ status: 'completed', passed: 1 });
    const utf16 = files.find((f) => f.filename === 'utf16be.csv')!;
    const other = await platform.aggregator({ types: ['seeker'] });
    const created = await createUpload(platform, other.token, { participantType: 'seeker', file: await readFile(utf16.file), filename: utf16.filename });
    await startUpload(platform, other.token, created.body.upload_id);
    await waitForJob(platform, other.token, created.body.upload_id);
    const report = await errorReport(platform, other.token, created.body.upload_id);
    expect(report.body).toContain('Ramón Dsouza');
  }, 120_000);

  it('the limits are configurable: total decompressed size and rows', async () => {
    const read = async (name: string, limits: Partial<typeof DEFAULT_TABLE_LIMITS>) => {
      const bytes = await readFile(files.find((f) => f.filename === name)!.file);
      try {
        const table = await openTable(async () => Readable.from([bytes]), name.endsWith('.xlsx') ? 'xlsx' : 'csv', { ...DEFAULT_TABLE_LIMITS, ...limits });
        for await (const _ of table.rows);
        return 'read';
      } catch (err) {
        expect(err).toBeInstanceOf(TableFormatError);
        return (err as Error).message;
      }
    };
    expect(await read('no-styles.xlsx', {})).toBe('read');
    expect(await read('no-styles.xlsx', { maxUncompressedBytes: 1000 })).toMatch(/decompresses to more than 1,000 bytes \(BULK_XLSX_MAX_UNCOMPRESSED_BYTES\)/);
    expect(await read('utf16le.csv', { maxRows: 1 })).toMatch(/more than 1 data rows \(BULK_MAX_ROWS\); split it/);
    expect(await read('utf16le.csv', { maxColumns: 3 })).toMatch(/the header row has 4 columns; at most 3/);
  });
});
