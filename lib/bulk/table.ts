/**
 * Reading an uploaded table (CSV or XLSX) as a stream of rows: header row first, then the data
 * rows one at a time, never the whole file in memory.
 */
import type { Readable } from 'node:stream';

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
  headers: string[];
  /** CSV: the encoding the file was decoded with (e.g. `utf-8`, `utf-16le`, `windows-1252`). */
  encoding?: string;
  /** XLSX: the name of the worksheet read. */
  sheet?: string;
  rows: AsyncIterable<TableRow>;
}

/**
 * Opens a stored table. `open` returns a fresh stream of the stored file each call (it may be
 * called twice, e.g. to sniff the encoding first).
 * @throws TableFormatError for file-level problems (also from the rows iterator, mid-file).
 */
export async function openTable(_open: () => Promise<Readable>, _format: TableFormat): Promise<Table> {
  throw new TableFormatError('reading tables is not implemented yet');
}
