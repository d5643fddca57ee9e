/**
 * A first pass over an XLSX file (a ZIP of XML parts) before exceljs reads it (issue 15): every
 * part is inflated once — the same streaming reader exceljs uses, unzipper — and its bytes counted,
 * so that a zip bomb is refused before any sheet is parsed or spilled to a temporary file, and a
 * damaged workbook is named as such instead of failing deep inside the parser:
 * - more than `maxUncompressedBytes` in all, or (past the first RATIO_FLOOR_BYTES) more than
 *   `maxRatio` bytes out per byte in: a "zip bomb" (OWASP "File Upload Cheat Sheet");
 * - a ZIP that ends early (truncated upload) or is not one;
 * - no workbook part or no worksheet part;
 * - worksheets that refer to shared strings (`t="s"`) without the shared-strings part (their
 *   text would silently read as empty cells).
 */
import { PassThrough, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import unzipper from 'unzipper';
import { TableFormatError, type TableLimits } from './table.ts';

/** Below this many decompressed bytes the ratio is not judged (small parts compress unevenly). */
const RATIO_FLOOR_BYTES = 16 * 1024 * 1024;
const WORKSHEET = /^xl\/worksheets\/sheet\d+\.xml$/;
const SHARED_STRING_CELL = 't="s"';

interface ZipEntry extends Readable {
  path: string;
  autodrain(): { promise(): Promise<void> };
}

const count = (n: number) => n.toLocaleString('en-US');

/**
 * Checks the XLSX file `input` (read to its end) as the module comment says.
 * @throws TableFormatError with the reason; errors of `input` itself pass through.
 */
export async function checkXlsxParts(input: Readable, limits: Pick<TableLimits, 'maxUncompressedBytes' | 'maxRatio'>): Promise<void> {
  let compressed = 0;
  let uncompressed = 0;
  let inputError: Error | undefined;
  input.once('error', (err) => { inputError = err; });
  const counter = new PassThrough();
  counter.on('data', (chunk: Buffer) => { compressed += chunk.length; });
  const zip = unzipper.Parse({ forceStream: true }) as unknown as AsyncIterable<ZipEntry> & NodeJS.WritableStream;
  const names = new Set<string>();
  let sharedStringCells = false;
  let current: ZipEntry | undefined;
  // A broken ZIP fails the parser, not the entry being read: end that entry's reading too.
  const feeding = pipeline(input, counter, zip as unknown as NodeJS.WritableStream);
  feeding.catch((err) => current?.destroy(err));
  try {
    for await (const entry of zip) {
      current = entry;
      names.add(entry.path);
      const sheet = WORKSHEET.test(entry.path);
      let tail = '';
      for await (const chunk of entry as AsyncIterable<Buffer>) {
        uncompressed += chunk.length;
        if (uncompressed > limits.maxUncompressedBytes) {
          throw new TableFormatError(`the XLSX file decompresses to more than ${count(limits.maxUncompressedBytes)} bytes (BULK_XLSX_MAX_UNCOMPRESSED_BYTES); `
            + 'it is either far larger than a spreadsheet of participants or a "zip bomb": save the data as CSV, or split it into smaller workbooks');
        }
        if (uncompressed > RATIO_FLOOR_BYTES && uncompressed > limits.maxRatio * Math.max(compressed, 1)) {
          throw new TableFormatError(`the XLSX file decompresses to more than ${limits.maxRatio} times its size (BULK_XLSX_MAX_RATIO), as a "zip bomb" does; `
            + 'open it in Excel or LibreOffice, remove what is not participant data and save it again, or save it as CSV');
        }
        if (sheet && !sharedStringCells) {
          const text = tail + chunk.toString('latin1');
          sharedStringCells = text.includes(SHARED_STRING_CELL);
          tail = text.slice(-SHARED_STRING_CELL.length);
        }
      }
    }
    await feeding;
  } catch (err) {
    input.destroy();
    if (err instanceof TableFormatError) throw err;
    if (inputError) throw inputError;
    throw new TableFormatError('the XLSX file is incomplete or damaged (its ZIP structure ends early or is broken); upload the complete file again, or open it in Excel or LibreOffice and save it again as .xlsx');
  }
  if (!names.has('xl/workbook.xml') || ![...names].some((n) => WORKSHEET.test(n))) {
    throw new TableFormatError('the XLSX file is damaged: it has no workbook or no worksheet part; open it in Excel or LibreOffice and save it again as .xlsx');
  }
  if (sharedStringCells && !names.has('xl/sharedStrings.xml')) {
    throw new TableFormatError('the XLSX file is damaged: its cells refer to a shared-strings part (xl/sharedStrings.xml) it does not contain, so their text is lost; open it in Excel or LibreOffice and save it again as .xlsx');
  }
}
