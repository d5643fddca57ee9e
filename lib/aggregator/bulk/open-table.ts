/** Opening a stored table in the reader of its format (the dispatcher above csv-table.ts and xlsx-table.ts). */
import type { Readable } from 'node:stream';
import { openCsvTable } from './csv-table.ts';
import { DEFAULT_TABLE_LIMITS, withLimits, type Table, type TableFormat, type TableLimits } from './table.ts';

/**
 * Opens a stored table. `open` returns a fresh stream of the stored file each call (it may be
 * called more than once: CSV is read once to choose its encoding, XLSX once to check its
 * decompressed size, then parsed). `scan` (ObjectStorage.scan of the same object), when given,
 * serves CSV's encoding pass: it reads into one reused buffer instead of a new one per read. The
 * table is held to `limits` (table.ts `withLimits`).
 * @throws TableFormatError "the file is empty", "the file has no header row", an encoding that
 *   cannot be determined, an unreadable or damaged workbook, a limit exceeded; errors of `open`
 *   itself pass through.
 */
export async function openTable(
  open: () => Promise<Readable>, format: TableFormat, limits: TableLimits = DEFAULT_TABLE_LIMITS, scan?: () => AsyncIterable<Buffer>,
): Promise<Table> {
  if (format === 'csv') return withLimits(await openCsvTable(open, scan), limits);
  // exceljs (with jszip, unzipper, archiver: ~20 MB of RSS) is loaded by the first workbook only,
  // so a worker that onboards CSV never holds it (issue 17, the worker's memory).
  const { openXlsxTable } = await import('./xlsx-table.ts');
  return withLimits(await openXlsxTable(open, limits), limits);
}
