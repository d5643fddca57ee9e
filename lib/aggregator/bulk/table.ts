/**
 * Reading an uploaded table (CSV or XLSX) as a stream of rows: header row first, then the data
 * rows one at a time or in batches, never the whole file in memory. The formats live in csv-table.ts and
 * xlsx-table.ts, and open-table.ts picks one; this module holds the shared shapes and rules:
 * - cells are trimmed of all Unicode white space (String.prototype.trim: spaces, tabs, U+00A0, U+3000, …);
 * - the header row is the first row that is not blank; fully blank rows are skipped, but row
 *   numbers still count them, as the spreadsheet shows them (header = row 1, first data row = 2);
 * - a row keeps every cell it has, even beyond the header row (the row coercer reports those).
 */
export type TableFormat = 'csv' | 'xlsx';

/** Most rows in one array of a Table's `batches`. */
export const ROW_BATCH = 500;

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
   * The data rows, once: read either `rows` or `batches` (one source serves both). Reading them to
   * the end releases the file; errors found mid-file (malformed CSV, an XLSX formula without a
   * stored result) are thrown as TableFormatError.
   */
  rows: AsyncIterable<TableRow>;
  /**
   * The same data rows in file order, in non-empty arrays of consecutive rows: one promise per
   * array, where `rows` costs one per row (the 266,978-row CSV alone, parsed in process before
   * the parser had its thread: 1.9 s against 2.4 s).
   */
  batches: AsyncIterable<TableRow[]>;
  /** Releases the file when the rows are not read to the end (or not at all). Idempotent. */
  close(): void;
}

/**
 * Limits of an uploaded table (issue 15; README "Limits and retention", docs/decisions.md
 * "Hardening"). A file beyond one fails with a TableFormatError naming the limit and its variable.
 */
export interface TableLimits {
  /** Most cells in the header row or any data row (BULK_MAX_COLUMNS). */
  maxColumns: number;
  /** Longest cell, in characters (BULK_MAX_CELL_CHARS). */
  maxCellChars: number;
  /** Most non-blank data rows (BULK_MAX_ROWS). */
  maxRows: number;
  /** XLSX: most bytes all parts may decompress to (BULK_XLSX_MAX_UNCOMPRESSED_BYTES). */
  maxUncompressedBytes: number;
  /** XLSX: largest uncompressed / compressed size of the file's parts (BULK_XLSX_MAX_RATIO). */
  maxRatio: number;
}

/**
 * Name of the grid tab of our XLSX template (template.ts), which xlsx-table.ts reads in preference
 * to other tabs. Here rather than in either, so that the template's module loads no workbook code.
 */
export const TEMPLATE_GRID_SHEET = 'Participants';

/** The documented defaults (lib/platform/config.ts holds the same values). */
export const DEFAULT_TABLE_LIMITS: TableLimits = {
  maxColumns: 1000, maxCellChars: 32_767, maxRows: 1_048_575, maxUncompressedBytes: 1000 * 1000 * 1000, maxRatio: 200,
};

/** The limits a platform configuration sets. */
export function tableLimits(config: {
  BULK_MAX_COLUMNS: number; BULK_MAX_CELL_CHARS: number; BULK_MAX_ROWS: number; BULK_XLSX_MAX_UNCOMPRESSED_BYTES: number; BULK_XLSX_MAX_RATIO: number;
}): TableLimits {
  return {
    maxColumns: config.BULK_MAX_COLUMNS, maxCellChars: config.BULK_MAX_CELL_CHARS, maxRows: config.BULK_MAX_ROWS,
    maxUncompressedBytes: config.BULK_XLSX_MAX_UNCOMPRESSED_BYTES, maxRatio: config.BULK_XLSX_MAX_RATIO,
  };
}

const count = (n: number) => n.toLocaleString('en-US');

/**
 * `table` with its header and rows checked against `limits`: more columns than maxColumns, a cell
 * longer than maxCellChars or more than maxRows data rows end the reading with a TableFormatError.
 * @throws TableFormatError when the header row is beyond a limit.
 */
export function withLimits(table: Table, limits: TableLimits): Table {
  const check = (values: string[], where: string) => {
    if (values.length > limits.maxColumns) {
      throw new TableFormatError(`${where} has ${count(values.length)} columns; at most ${count(limits.maxColumns)} are accepted (BULK_MAX_COLUMNS): remove the extra columns`);
    }
    for (let i = 0; i < values.length; i++) {
      if (values[i].length > limits.maxCellChars) {
        throw new TableFormatError(`${where}, column ${columnLetter(i)} holds ${count(values[i].length)} characters; a cell may hold at most ${count(limits.maxCellChars)} (BULK_MAX_CELL_CHARS): shorten it`);
      }
    }
  };
  try {
    check(table.headers, 'the header row');
  } catch (err) {
    table.close();
    throw err;
  }
  async function* batches(): AsyncGenerator<TableRow[]> {
    let n = 0;
    try {
      for await (const batch of table.batches) {
        for (const row of batch) {
          if (++n > limits.maxRows) {
            throw new TableFormatError(`the file has more than ${count(limits.maxRows)} data rows (BULK_MAX_ROWS); split it into smaller files`);
          }
          check(row.values, `row ${row.rowNumber}`);
        }
        yield batch;
      }
    } finally {
      table.close();
    }
  }
  const checked = batches();
  return { ...table, batches: checked, rows: rowsOf(checked) };
}

/** The rows of `batches`, one at a time (a Table's `rows` beside its `batches`). */
export async function* rowsOf(batches: AsyncIterable<TableRow[]>): AsyncGenerator<TableRow> {
  for await (const batch of batches) yield* batch;
}

/** The rows of `rows` in arrays of up to `size` (a Table's `batches` where the format reads one row at a time). */
export async function* batchesOf(rows: AsyncIterable<TableRow>, size: number): AsyncGenerator<TableRow[]> {
  let batch: TableRow[] = [];
  for await (const row of rows) {
    batch.push(row);
    if (batch.length === size) {
      yield batch;
      batch = [];
    }
  }
  if (batch.length) yield batch;
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
