/** Opening a stored table in the reader of its format (the dispatcher above csv-table.ts and xlsx-table.ts). */
import type { Readable } from 'node:stream';
import { openCsvTable } from './csv-table.ts';
import type { Table, TableFormat } from './table.ts';
import { openXlsxTable } from './xlsx-table.ts';

/**
 * Opens a stored table. `open` returns a fresh stream of the stored file each call (it may be
 * called twice: CSV is read once to choose its encoding, then parsed).
 * @throws TableFormatError "the file is empty", "the file has no header row", an encoding that
 *   cannot be determined, or an unreadable workbook; errors of `open` itself pass through.
 */
export async function openTable(open: () => Promise<Readable>, format: TableFormat): Promise<Table> {
  return format === 'csv' ? openCsvTable(open) : openXlsxTable(open);
}
