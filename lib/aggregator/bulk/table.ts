/**
 * Reading an uploaded table (CSV or XLSX) as a stream of rows: header row first, then the data
 * rows one at a time, never the whole file in memory. The formats live in csv-table.ts and
 * xlsx-table.ts, and open-table.ts picks one; this module holds the shared shapes and rules:
 * - cells are trimmed of all Unicode white space (String.prototype.trim: spaces, tabs, U+00A0, U+3000, …);
 * - the header row is the first row that is not blank; fully blank rows are skipped, but row
 *   numbers still count them, as the spreadsheet shows them (header = row 1, first data row = 2);
 * - a row keeps every cell it has, even beyond the header row (the row coercer reports those).
 */
export type TableFormat = 'csv' | 'xlsx';

/** A file-level problem; its message is shown to the operator as the job's status_reason. */
export class TableFormatError extends Error {
  name = 'TableFormatError';
}

export interface TableRow {
  /** The row as a spreadsheet user sees it (header = row 1, first data row = 2). */
  rowNumber: number;
  /** Trimmed cells; `values[i]` belongs to `headers[i]`; may be longer than the header row. */
  values: string[];
}

export interface Table {
  /** Trimmed header cells, in file order (empty string for a column without a header). */
  headers: string[];
  /** CSV: the encoding the file was decoded with: `utf-8`, `utf-16le`, `utf-16be` or `windows-1252`. */
  encoding?: string;
  /** XLSX: the name of the worksheet read. */
  sheet?: string;
  /**
   * The data rows, once. Reading them to the end releases the file; errors found mid-file
   * (malformed CSV, an XLSX formula without a stored result) are thrown as TableFormatError.
   */
  rows: AsyncIterable<TableRow>;
  /** Releases the file when the rows are not read to the end (or not at all). Idempotent. */
  close(): void;
}

/** A cell as the table reports it: trimmed of all Unicode white space. */
export function cleanCell(cell: string): string {
  return cell.trim();
}

/** Whether every cell of a (cleaned) row is empty. */
export function isBlankRow(values: string[]): boolean {
  for (let i = 0; i < values.length; i++) if (values[i] !== '') return false;
  return true;
}

/** Spreadsheet letters of a 0-based column index: 0 → A, 25 → Z, 26 → AA. */
export function columnLetter(index: number): string {
  let letters = '';
  for (let n = index + 1; n > 0; n = Math.floor((n - 1) / 26)) letters = String.fromCharCode(65 + ((n - 1) % 26)) + letters;
  return letters;
}
