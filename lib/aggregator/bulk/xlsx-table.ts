/**
 * XLSX tables, streamed with exceljs's `stream.xlsx.WorkbookReader` (shared strings and styles
 * cached, worksheets read row by row in the order they are stored in the file).
 *
 * Which worksheet: our own template's grid tab (`TEMPLATE_GRID_SHEET`) when the workbook has one;
 * otherwise the first visible worksheet that has a non-blank row. Cells as the spreadsheet shows
 * them: formulas by their stored result, dates as ISO 8601 (`2024-03-05`, or with the time of day
 * when there is one), numbers without float noise (15 significant digits, as Excel displays them),
 * booleans TRUE/FALSE, rich text and hyperlinks as their text, error cells as their code (`#N/A`).
 * A merged range holds its value in its top-left cell only; the other cells read as empty.
 *
 * Number formats are checked before a row is read (`checkNumberFormats`): exceljs decides whether
 * a number is a date with a pattern (`/\[[^\]]*]/g`) that is quadratic in a format's unclosed `[`s,
 * run once per numeric cell (docs/decisions.md, "Linear-time input").
 */
import type { Readable } from 'node:stream';
import ExcelJS from 'exceljs';
import {
  batchesOf, cleanCell, DEFAULT_TABLE_LIMITS, isBlankRow, ROW_BATCH, TableFormatError, TEMPLATE_GRID_SHEET, type Table, type TableLimits, type TableRow,
} from './table.ts';
import { checkXlsxParts } from './xlsx-parts.ts';

const MS_PER_DAY = 86_400_000;
/** Days from 1899-12-30 (Excel's day 0) to 1970-01-01; 1462 more in the 1904 date system. */
const EXCEL_EPOCH_DAYS = 25_569;
const DATE1904_OFFSET_DAYS = 1_462;

/** The parts of exceljs's streaming readers we use (their published typings omit these). */
interface WorksheetReader extends AsyncIterable<ExcelJS.Row> {
  name: string;
  state?: string;
}
interface WorkbookReader extends AsyncIterable<WorksheetReader> {
  model?: { sheets?: { name: string; state?: string }[] };
  properties?: { model?: { date1904?: boolean } };
  styles?: { model?: { numFmts?: { id?: number; formatCode?: unknown }[] } };
}

/** Excel's own limit on the length of a number format code. */
const MAX_FORMAT_CODE_CHARS = 255;

/**
 * Opens an XLSX table (see `openTable`); rowNumber is the worksheet's own row number. The file is
 * first checked part by part (xlsx-parts.ts: decompressed size and ratio in `limits`, damage).
 * @throws TableFormatError when the workbook is a zip bomb, damaged or cannot be read, or has no
 *   sheet with data ("the file has no header row"), and (from the rows iterator) for a formula
 *   cell without a stored result.
 */
export async function openXlsxTable(open: () => Promise<Readable>, limits: TableLimits = DEFAULT_TABLE_LIMITS): Promise<Table> {
  await checkXlsxParts(await open(), limits);
  const input = await open();
  // A failure of the stored file's stream is not a problem of the file's format: pass it on as is.
  let inputError: Error | undefined;
  input.once('error', (err) => { inputError = err; });
  const failure = (err: unknown) => inputError ?? unreadable(err);
  const workbook = new ExcelJS.stream.xlsx.WorkbookReader(input, {
    worksheets: 'emit', sharedStrings: 'cache', styles: 'cache', hyperlinks: 'ignore', entries: 'ignore',
  }) as unknown as WorkbookReader;
  const sheets = workbook[Symbol.asyncIterator]();
  const close = () => {
    input.destroy();
    void sheets.return?.(undefined).catch(() => {});
  };
  try {
    for (let next = await sheets.next(); !next.done; next = await sheets.next()) {
      const sheet = next.value;
      if (!wanted(workbook, sheet)) continue;
      checkNumberFormats(workbook);
      const reader = new SheetRows(sheet, workbook.properties?.model?.date1904 === true);
      const header = await reader.next();
      if (!header) continue;
      const rows = async function* (): AsyncGenerator<TableRow> {
        try {
          for (let row = await reader.next(); row; row = await reader.next()) yield row;
        } catch (err) {
          throw failure(err);
        } finally {
          close();
        }
      };
      // exceljs reads a row at a time; batches are gathered from those rows.
      const sheetRows = rows();
      return { headers: header.values, sheet: sheet.name, rows: sheetRows, batches: batchesOf(sheetRows, ROW_BATCH), close };
    }
  } catch (err) {
    close();
    throw failure(err);
  }
  close();
  throw new TableFormatError('the file has no header row: no worksheet has any data');
}

/**
 * Refuses the workbook's custom number formats that Excel does not write: longer than 255
 * characters, or with a `[` inside a `[…]` section. Within these bounds exceljs's date check costs
 * at most one pass over the format per cell. The styles part is read before a sheet's rows are,
 * or not at all for that sheet (then its cells have no custom format).
 * @throws TableFormatError naming the format
 */
function checkNumberFormats(workbook: WorkbookReader): void {
  for (const { id, formatCode } of workbook.styles?.model?.numFmts ?? []) {
    if (typeof formatCode !== 'string') continue;
    if (formatCode.length > MAX_FORMAT_CODE_CHARS || /\[[^\][]*\[/.test(formatCode)) {
      throw new TableFormatError(`the XLSX workbook has a number format (id ${id}, ${JSON.stringify(formatCode.slice(0, 40))}${formatCode.length > 40 ? '…' : ''}, `
        + `${formatCode.length} characters) that Excel does not write: longer than ${MAX_FORMAT_CODE_CHARS} characters or with "[" inside "[…]"; `
        + 'open it in Excel or LibreOffice, give the cells a standard number format and save it again, or save it as CSV');
    }
  }
}

/** Our template's grid tab when the workbook has one, else any visible worksheet. */
function wanted(workbook: WorkbookReader, sheet: WorksheetReader): boolean {
  if (sheet.state === 'hidden' || sheet.state === 'veryHidden') return false;
  const hasGrid = workbook.model?.sheets?.some((s) => s.name === TEMPLATE_GRID_SHEET && (s.state ?? 'visible') === 'visible');
  return !hasGrid || sheet.name === TEMPLATE_GRID_SHEET;
}

/** The non-blank rows of one worksheet, as cleaned strings. */
class SheetRows {
  private readonly rows: AsyncIterator<ExcelJS.Row>;

  constructor(private readonly sheet: WorksheetReader, private readonly date1904: boolean) {
    this.rows = sheet[Symbol.asyncIterator]();
  }

  async next(): Promise<TableRow | null> {
    for (let next = await this.rows.next(); !next.done; next = await this.rows.next()) {
      const values: string[] = [];
      next.value.eachCell((cell, col) => {
        values[col - 1] = cleanCell(this.text(cell));
      });
      for (let i = 0; i < values.length; i++) values[i] ??= '';
      if (!isBlankRow(values)) return { rowNumber: next.value.number, values };
    }
    return null;
  }

  private text(cell: ExcelJS.Cell): string {
    const value = cell.value as unknown;
    if (value !== null && typeof value === 'object' && !(value instanceof Date) && ('formula' in value || 'sharedFormula' in value)) {
      // Shared-formula cells other than the first come as plain objects; `cell.result` keeps a 0 result.
      const result = cell.type === ExcelJS.ValueType.Formula ? cell.result : (value as { result?: unknown }).result;
      if (result === undefined) {
        throw new TableFormatError(`cell ${cell.address} of sheet "${this.sheet.name}" has a formula without a stored result; open the file in Excel or LibreOffice and save it again so the results are stored`);
      }
      if (typeof result === 'number' && isDateFormat(cell.numFmt)) return isoDate(excelDate(result, this.date1904));
      return scalarText(result);
    }
    return scalarText(value);
  }
}

function scalarText(value: unknown): string {
  if (value === null || value === undefined) return '';
  if (typeof value === 'string') return value;
  if (typeof value === 'number') return Number.isNaN(value) ? '#VALUE!' : numberText(value);
  if (typeof value === 'boolean') return value ? 'TRUE' : 'FALSE';
  if (value instanceof Date) return isoDate(value);
  const object = value as { richText?: { text: string }[]; text?: unknown; error?: string };
  if (object.richText) return object.richText.map((r) => r.text).join('');
  if (object.error) return object.error;
  if (object.text !== undefined) return scalarText(object.text);
  return '';
}

/** A number as Excel displays it by default: at most 15 significant digits, so no float noise. */
export function numberText(n: number): string {
  return Number.isInteger(n) ? String(n) : String(Number(n.toPrecision(15)));
}

/** `YYYY-MM-DD`, or `YYYY-MM-DDTHH:MM:SS` when there is a time of day (worksheet times have no zone). */
function isoDate(date: Date): string {
  const iso = date.toISOString();
  if (iso.endsWith('T00:00:00.000Z')) return iso.slice(0, 10);
  return iso.endsWith('.000Z') ? iso.slice(0, 19) : iso.slice(0, 23);
}

function excelDate(serial: number, date1904: boolean): Date {
  return new Date(Math.round((serial - EXCEL_EPOCH_DAYS + (date1904 ? DATE1904_OFFSET_DAYS : 0)) * MS_PER_DAY));
}

/**
 * Whether a number format shows dates or times (as exceljs decides for plain values; a `[` never
 * opens inside `[…]`, see `checkNumberFormats`, so `[^\][]` strips the same sections linearly).
 */
function isDateFormat(format: string | undefined): boolean {
  return !!format && /[ymdhsb]/i.test(format.replace(/\[[^\][]*]/g, '').replace(/"[^"]*"/g, ''));
}

/**
 * The operator's reason for a workbook exceljs could not read. Never the runtime error's own text
 * (such as "Cannot read properties of undefined"): it names our code, not the file (issue 15).
 */
function unreadable(err: unknown): Error {
  if (err instanceof TableFormatError) return err;
  return new TableFormatError('the XLSX workbook is malformed: one of its parts (workbook, worksheet, styles or shared strings) could not be read; '
    + 'open it in Excel or LibreOffice and save it again as .xlsx, or save it as CSV');
}
