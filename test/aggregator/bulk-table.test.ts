import { Readable } from 'node:stream';
import ExcelJS from 'exceljs';
import iconv from 'iconv-lite';
import { describe, expect, it } from 'vitest';
import { detectTableFormat, unsupportedFileMessage } from '../../lib/aggregator/bulk/file-type.ts';
import { openTable } from '../../lib/aggregator/bulk/open-table.ts';
import { ROW_BATCH, TableFormatError, type Table, type TableFormat, type TableRow } from '../../lib/aggregator/bulk/table.ts';

/** An `open` function over `bytes`, cut into chunks of `chunkSize` bytes (to split characters across chunks). */
function source(bytes: Buffer, chunkSize = 1 << 16): () => Promise<Readable> {
  return async () => {
    const chunks: Buffer[] = [];
    for (let i = 0; i < bytes.length; i += chunkSize) chunks.push(bytes.subarray(i, i + chunkSize));
    return Readable.from(chunks);
  };
}

async function rowsOf(table: Table): Promise<TableRow[]> {
  const rows: TableRow[] = [];
  for await (const row of table.rows) rows.push(row);
  return rows;
}

async function read(bytes: Buffer, format: TableFormat = 'csv', chunkSize?: number) {
  const table = await openTable(source(bytes, chunkSize), format);
  return { table, rows: await rowsOf(table) };
}

async function formatError(promise: Promise<unknown>): Promise<string> {
  const err = await promise.then(() => null, (e: unknown) => e);
  expect(err).toBeInstanceOf(TableFormatError);
  return (err as Error).message;
}

const TEXT = 'name,district,note\r\nCafé Karora,Kaithal,“quoted” – €5 ’s\r\nPHC Ghudda,Bathinda,plain\r\n';
const EXPECTED = [
  { rowNumber: 2, values: ['Café Karora', 'Kaithal', '“quoted” – €5 ’s'] },
  { rowNumber: 3, values: ['PHC Ghudda', 'Bathinda', 'plain'] },
];

describe('CSV encodings', () => {
  it('reads UTF-8 with and without a byte-order mark, also when characters straddle chunks', async () => {
    for (const bytes of [Buffer.from(TEXT), Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(TEXT)])]) {
      const { table, rows } = await read(bytes, 'csv', 5);
      expect(table.encoding).toBe('utf-8');
      expect(table.headers).toEqual(['name', 'district', 'note']);
      expect(rows).toEqual(EXPECTED);
    }
  });

  it('reads UTF-16 LE and BE, with a byte-order mark or recognised without one', async () => {
    for (const encoding of ['utf-16le', 'utf-16be']) {
      for (const addBOM of [true, false]) {
        const { table, rows } = await read(iconv.encode(TEXT, encoding, { addBOM }), 'csv', 7);
        expect(table.encoding).toBe(encoding);
        expect(table.headers).toEqual(['name', 'district', 'note']);
        expect(rows).toEqual(EXPECTED);
      }
    }
  });

  it('reads Windows-1252 (é, ’, €, NBSP) when the file is not UTF-8', async () => {
    const bytes = iconv.encode(`${TEXT}Dispensary\u00a0,Kaithal,\u00a0x\r\n`, 'windows-1252');
    expect(bytes.includes(0xe9) && bytes.includes(0x92) && bytes.includes(0x80)).toBe(true);
    const { table, rows } = await read(bytes);
    expect(table.encoding).toBe('windows-1252');
    expect(rows).toEqual([...EXPECTED, { rowNumber: 4, values: ['Dispensary', 'Kaithal', 'x'] }]);
  });

  it('refuses text whose encoding cannot be determined, naming the problem and the line', async () => {
    const mixed = Buffer.concat([Buffer.from('name,note\nCafé,utf-8\n'), iconv.encode('Caf\u00e9,cp1252\n', 'windows-1252')]);
    expect(await formatError(read(mixed))).toMatch(/mixes text encodings: line 2 is UTF-8 but line 3 is not/);
    const undefinedByte = Buffer.concat([Buffer.from('name\nab'), Buffer.from([0x81]), Buffer.from('\n')]);
    expect(await formatError(read(undefinedByte))).toMatch(/line 2 has byte 0x81, which is not a character in Windows-1252/);
    const shiftJis = iconv.encode('名前,地区\n東京都立病院,千代田区\n大阪市立学校,北区\n', 'shift_jis');
    expect(await formatError(read(shiftJis))).toMatch(/not UTF-8, UTF-16 or Windows-1252.*multi-byte encoding/);
    const bomThenLatin1 = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), iconv.encode('name\nCaf\u00e9\n', 'windows-1252')]);
    expect(await formatError(read(bomThenLatin1))).toMatch(/UTF-8 byte-order mark, but line 2 is not valid UTF-8/);
    expect(await formatError(read(Buffer.from('name\na\u0000b\n')))).toMatch(/line 2 contains a NUL byte/);
  });
});

describe('CSV structure', () => {
  it('trims every Unicode white space around cells (NBSP, em space, tab) but keeps inner ones', async () => {
    const { table, rows } = await read(Buffer.from(' name\u00a0,\tdistrict \n\u00a0Govt\u00a0School \u2003,\u3000Kaithal\t\n'));
    expect(table.headers).toEqual(['name', 'district']);
    expect(rows).toEqual([{ rowNumber: 2, values: ['Govt\u00a0School', 'Kaithal'] }]);
  });

  it('keeps quoted newlines in one cell, mixes CRLF/LF/CR, and numbers rows as a spreadsheet shows them', async () => {
    const text = 'id,name\r\n1,"Saint High school \r\nCoeducation"\r\n\r\n , \r\n2,"He said ""hi"""\n3,plain\r4,last';
    const { rows } = await read(Buffer.from(text));
    expect(rows).toEqual([
      { rowNumber: 2, values: ['1', 'Saint High school \r\nCoeducation'] },
      // rows 3 (empty line) and 4 (only spaces) are blank: skipped, but counted
      { rowNumber: 5, values: ['2', 'He said "hi"'] },
      { rowNumber: 6, values: ['3', 'plain'] },
      { rowNumber: 7, values: ['4', 'last'] },
    ]);
  });

  it('sniffs semicolon- and tab-separated files from the header line (Excel "Unicode text" is UTF-16 + tabs)', async () => {
    const semicolon = await read(Buffer.from('name;"district, full";note\nA;"B; C";x,y\n'));
    expect(semicolon.table.headers).toEqual(['name', 'district, full', 'note']);
    expect(semicolon.rows[0].values).toEqual(['A', 'B; C', 'x,y']);
    const tabs = await read(iconv.encode('name\tdistrict\nA, B\tKaithal\n', 'utf-16le', { addBOM: true }));
    expect(tabs.table.headers).toEqual(['name', 'district']);
    expect(tabs.rows[0].values).toEqual(['A, B', 'Kaithal']);
  });

  it('keeps cells beyond the header row, and rows shorter than it', async () => {
    const { rows } = await read(Buffer.from('a,b\n1,2,3,4\n5\n'));
    expect(rows.map((r) => r.values)).toEqual([['1', '2', '3', '4'], ['5']]);
  });

  it('removes the apostrophe a formula-injection guard put before =, +, -, @ (re-uploaded error reports)', async () => {
    const { rows } = await read(Buffer.from("phone,note,other\n'+919876543210,'=SUM(A1),'tis fine\n"));
    expect(rows[0].values).toEqual(['+919876543210', '=SUM(A1)', "'tis fine"]);
  });

  it('says the file is empty, or has no header row; a header-only file is a table without rows', async () => {
    expect(await formatError(read(Buffer.alloc(0)))).toBe('the file is empty');
    expect(await formatError(read(Buffer.from([0xef, 0xbb, 0xbf])))).toBe('the file is empty');
    expect(await formatError(read(Buffer.from('\r\n , ,\r\n\r\n')))).toBe('the file has no header row');
    const { table, rows } = await read(Buffer.from('\n\nname,district\n'));
    expect(table.headers).toEqual(['name', 'district']);
    expect(rows).toEqual([]);
  });

  it('fails with the row number when a quote is never closed, after delivering the rows before it', async () => {
    const table = await openTable(source(Buffer.from('name,district\nA,"B\nB2"\nC,"D\nE,F\n')), 'csv');
    const seen: TableRow[] = [];
    const message = await formatError((async () => {
      for await (const row of table.rows) seen.push(row);
    })());
    expect(seen).toEqual([{ rowNumber: 2, values: ['A', 'B\nB2'] }]);
    expect(message).toMatch(/^row 3 \(starting on line 4\) opens a quoted field that is never closed/);
  });

  it('serves the rows in batches as the staging task reads them: file order, blank rows skipped, at most ROW_BATCH a batch, the same error', async () => {
    // A blank line after the header, every 100th row blank, each row with a quoted newline.
    const lines = ['id,name', ''];
    for (let i = 1; i <= 1234; i++) lines.push(i % 100 === 0 ? ' , ' : `${i},"Name ${i}\nsecond line"`);
    const table = await openTable(source(Buffer.from(`${lines.join('\r\n')}\r\n`), 4096), 'csv');
    const batches: TableRow[][] = [];
    for await (const batch of table.batches) batches.push(batch);
    const expected = Array.from({ length: 1234 }, (_, k) => k + 1).filter((i) => i % 100 !== 0)
      .map((i) => ({ rowNumber: i + 2, values: [String(i), `Name ${i}\nsecond line`] }));
    expect(batches.flat()).toEqual(expected);
    expect(batches.length).toBeGreaterThanOrEqual(3);
    expect(batches.every((batch) => batch.length > 0 && batch.length <= ROW_BATCH)).toBe(true);

    const broken = await openTable(source(Buffer.from('name,district\nA,"B\nB2"\nC,"D\nE,F\n')), 'csv');
    const seen: TableRow[] = [];
    const message = await formatError((async () => {
      for await (const batch of broken.batches) seen.push(...batch);
    })());
    expect(seen).toEqual([{ rowNumber: 2, values: ['A', 'B\nB2'] }]);
    expect(message).toMatch(/^row 3 \(starting on line 4\) opens a quoted field that is never closed/);
  });

  it('streams a large file: the parser never reads far ahead of the rows consumed', async () => {
    const ROWS = 150_000;
    const line = (i: number) => `${i},Facility number ${i} with a longish name,Education,Kaithal,Haryana,29.${i % 1000},76.${i % 997}\r\n`;
    let produced = 0;
    const open = async () => {
      produced = 0;
      return Readable.from((function* () {
        let chunk = 'facility_id,name,category,district,state,latitude,longitude\r\n';
        for (let i = 1; i <= ROWS; i++) {
          chunk += line(i);
          if (chunk.length >= 16_384) {
            produced += chunk.length;
            yield Buffer.from(chunk);
            chunk = '';
          }
        }
        produced += chunk.length;
        yield Buffer.from(chunk);
      })());
    };
    const table = await openTable(open, 'csv');
    let consumed = 0;
    let count = 0;
    let maxAhead = 0;
    for await (const row of table.rows) {
      count++;
      consumed += line(Number(row.values[0])).length;
      maxAhead = Math.max(maxAhead, produced - consumed);
    }
    expect(count).toBe(ROWS);
    expect(produced).toBeGreaterThan(10_000_000);
    // What is buffered between the source and the consumer stays in the hundreds of kilobytes.
    expect(maxAhead).toBeLessThan(1_000_000);
  });
});

describe('file type detection', () => {
  it('recognises CSV text, XLSX workbooks and refuses other files', async () => {
    const workbook = new ExcelJS.Workbook();
    workbook.addWorksheet('Sheet1').addRow(['name']);
    const xlsx = Buffer.from(await workbook.xlsx.writeBuffer());
    expect(detectTableFormat(xlsx.subarray(0, 65536))).toBe('xlsx');
    expect(detectTableFormat(Buffer.from(TEXT))).toBe('csv');
    expect(detectTableFormat(iconv.encode(TEXT, 'windows-1252'))).toBe('csv');
    expect(detectTableFormat(iconv.encode(TEXT, 'utf-16le'))).toBe('csv');
    expect(detectTableFormat(iconv.encode(TEXT, 'utf-16be', { addBOM: true }))).toBe('csv');
    expect(detectTableFormat(Buffer.alloc(0))).toBe('csv');

    const docx = Buffer.concat([Buffer.from('PK\x03\x04', 'latin1'), Buffer.alloc(22), Buffer.from([17, 0, 0, 0]), Buffer.from('word/document.xml')]);
    const pdf = Buffer.from('%PDF-1.7\n%âãÏÓ\n1 0 obj');
    const xls = Buffer.from([0xd0, 0xcf, 0x11, 0xe0, 0xa1, 0xb1, 0x1a, 0xe1, 0, 0, 0, 0]);
    const png = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d]);
    const binary = Buffer.from([0x01, 0x02, 0x03, 0x41, 0x00, 0x42, 0x43, 0x44]);
    for (const file of [docx, pdf, xls, png, binary]) expect(detectTableFormat(file)).toBeNull();
    expect(unsupportedFileMessage(xls)).toMatch(/Excel 97-2003 \(\.xls\) workbook or a password-protected file; upload a CSV file or an Excel \.xlsx workbook/);
    // With the container's directory in the head, the message says which and what to do.
    const named = (stream: string) => Buffer.concat([xls, Buffer.from(`${stream}\u0000`, 'utf16le')]);
    expect(unsupportedFileMessage(named('EncryptedPackage'))).toMatch(/password-protected workbook.*remove the password/);
    expect(unsupportedFileMessage(named('Workbook'))).toMatch(/Excel 97-2003 \(\.xls\) workbook, whatever its name says; open it .* save it as an Excel \.xlsx workbook or as CSV/);
    expect(unsupportedFileMessage(docx)).toMatch(/ZIP archive that is not an XLSX workbook/);
  });
});

describe('XLSX tables', () => {
  async function xlsx(build: (workbook: ExcelJS.Workbook) => void): Promise<Buffer> {
    const workbook = new ExcelJS.Workbook();
    build(workbook);
    return Buffer.from(await workbook.xlsx.writeBuffer());
  }

  it('reads the first visible sheet with data: cached formula results, dates, numbers, booleans, rich text, links, errors, merged cells', async () => {
    const bytes = await xlsx((wb) => {
      wb.addWorksheet('Cover');
      wb.addWorksheet('Lookup', { state: 'hidden' }).addRow(['hidden', 'data']);
      const ws = wb.addWorksheet('Facilities');
      ws.addRow([]);
      ws.addRow(['name', 'capacity', 'opened', 'updated', 'active', 'double', 'note', 'link']);
      ws.addRow([' Govt\u00a0School ', 400, new Date(Date.UTC(2019, 5, 1)), new Date(Date.UTC(2024, 2, 5, 14, 30)), true,
        { formula: 'B3*2', result: 800 }, { richText: [{ text: 'Bold ', font: { bold: true } }, { text: 'and plain' }] }, { text: 'site', hyperlink: 'https://example.org' }]);
      ws.addRow(['PHC', 0.1 + 0.2, null, null, false, { sharedFormula: 'F3', result: 0 }, { error: '#N/A' }]);
      ws.addRow(['Merged', 7]);
      ws.addRow(['', 8]);
      ws.mergeCells('A5:A6');
      ws.addRow([]);
      ws.addRow(['x', '', '', '', '', { formula: 'DATE(2020,1,2)', result: 43832 }]);
      ws.getCell('C3').numFmt = 'dd/mm/yyyy';
      ws.getCell('D3').numFmt = 'yyyy-mm-dd hh:mm';
      ws.getCell('F8').numFmt = 'd-mmm-yy';
      wb.addWorksheet('Later').addRow(['not', 'read']);
    });
    const { table, rows } = await read(bytes, 'xlsx');
    expect(table.sheet).toBe('Facilities');
    expect(table.headers).toEqual(['name', 'capacity', 'opened', 'updated', 'active', 'double', 'note', 'link']);
    expect(rows).toEqual([
      { rowNumber: 3, values: ['Govt\u00a0School', '400', '2019-06-01', '2024-03-05T14:30:00', 'TRUE', '800', 'Bold and plain', 'site'] },
      { rowNumber: 4, values: ['PHC', '0.3', '', '', 'FALSE', '0', '#N/A'] },
      // A merged range keeps its value in the top-left cell only.
      { rowNumber: 5, values: ['Merged', '7'] },
      { rowNumber: 6, values: ['', '8'] },
      { rowNumber: 8, values: ['x', '', '', '', '', '2020-01-02'] },
    ]);
  });

  it('reads the grid tab of our template even when other tabs come first', async () => {
    const bytes = await xlsx((wb) => {
      wb.addWorksheet('Instructions').addRow(['Fill in the Participants tab']);
      const grid = wb.addWorksheet('Participants');
      grid.addRow(['name', 'district']);
      grid.addRow(['PHC', 'Kaithal']);
    });
    const { table, rows } = await read(bytes, 'xlsx');
    expect(table.sheet).toBe('Participants');
    expect(rows).toEqual([{ rowNumber: 2, values: ['PHC', 'Kaithal'] }]);
  });

  it('fails on a formula without a stored result, on a workbook without data, and on a damaged file', async () => {
    const noResult = await xlsx((wb) => {
      const ws = wb.addWorksheet('Data');
      ws.addRow(['name', 'total']);
      ws.addRow(['a', { formula: 'SUM(1,2)' }]);
    });
    const table = await openTable(source(noResult), 'xlsx');
    expect(await formatError(rowsOf(table))).toMatch(/^cell B2 of sheet "Data" has a formula without a stored result/);

    const empty = await xlsx((wb) => {
      wb.addWorksheet('One');
      wb.addWorksheet('Two');
    });
    expect(await formatError(read(empty, 'xlsx'))).toMatch(/^the file has no header row/);

    const damaged = Buffer.concat([noResult.subarray(0, 600), Buffer.alloc(400, 0x41)]);
    expect(await formatError(read(damaged, 'xlsx'))).toMatch(/^the XLSX file is incomplete or damaged .*save it again as \.xlsx$/);
  });
});
