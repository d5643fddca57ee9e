/**
 * CSV tables, streamed through csv-parse (RFC 4180 quoting, quoted newlines, CRLF/LF/CR).
 *
 * The encoding is chosen for the whole file first (lib/bulk/encoding.ts, a pass over a first
 * stream); a second stream is decoded (iconv-lite for UTF-16 and Windows-1252) and parsed. The
 * delimiter — comma, semicolon or tab — is sniffed from the header line.
 */
import { finished, pipeline, Readable, type Transform } from 'node:stream';
import { CsvError, parse } from 'csv-parse';
import iconv from 'iconv-lite';
import { detectEncoding } from './encoding.ts';
import { cleanCell, isBlankRow, ROW_BATCH, rowsOf, TableFormatError, type Table, type TableRow } from './table.ts';

const DELIMITERS = [',', ';', '\t'] as const;
/** Longest record accepted (characters): bounds memory when a quote is never closed. */
const MAX_RECORD_CHARS = 4 * 1024 * 1024;
/** How much text is read to find the header line for delimiter sniffing. */
const SNIFF_CHARS = 64 * 1024;
/** A cell that a formula-injection guard (lib/bulk/error-report.ts `protectCell`, csv-stringify `escape_formulas`) prefixed with `'`. */
const ESCAPED_FORMULA = /^'[=+\-@\t\r\uFF1D\uFF0B\uFF0D\uFF20]/;

/**
 * Opens a CSV table (see `openTable`; `scan`, when given, serves the encoding pass instead of a
 * stream from `open`). Row numbers count records, as a spreadsheet shows them (a quoted newline
 * does not start a new row; blank lines do).
 * @throws TableFormatError for an empty file, no header row, an unknown encoding, and (from the
 *   rows iterator) malformed CSV such as a quote that is never closed.
 */
export async function openCsvTable(open: () => Promise<Readable>, scan?: () => AsyncIterable<Buffer>): Promise<Table> {
  const { encoding, empty } = await detectEncoding(scan ? scan() : await open());
  if (empty) throw new TableFormatError('the file is empty');
  const raw = await open();
  const text = encoding === 'utf-8' ? raw : pipeline(raw, iconv.decodeStream(encoding) as unknown as Transform, () => {});
  const source = text[Symbol.asyncIterator]() as AsyncIterator<Buffer | string>;

  // Read the first line (or a large first piece) to sniff the delimiter, then replay it.
  const head: (Buffer | string)[] = [];
  let headText = '';
  while (!headText.includes('\n') && headText.length < SNIFF_CHARS) {
    const next = await source.next();
    if (next.done) break;
    head.push(next.value);
    headText += typeof next.value === 'string' ? next.value : next.value.toString('utf8');
  }
  const delimiter = sniffDelimiter(headText);

  const parser = parse({
    bom: true,
    delimiter,
    record_delimiter: ['\r\n', '\n', '\r'],
    relax_quotes: true,
    relax_column_count: true,
    skip_empty_lines: false,
    max_record_size: MAX_RECORD_CHARS,
  });
  async function* replay(): AsyncGenerator<Buffer | string> {
    yield* head;
    for (let next = await source.next(); !next.done; next = await source.next()) yield next.value;
  }
  pipeline(Readable.from(replay(), { objectMode: false }), parser, () => {});
  const records = recordBatches(parser, ROW_BATCH);

  let recordNumber = 0;
  // Physical line on which the next record starts (records may hold quoted newlines), for messages.
  let nextLine = 1;
  /** The next records read, numbered and cleaned (blank ones included); null at the end. */
  const nextRecords = async (): Promise<TableRow[] | null> => {
    let next: IteratorResult<string[][]>;
    try {
      next = await records.next();
    } catch (err) {
      throw csvError(err, recordNumber + 1, nextLine);
    }
    if (next.done) return null;
    return next.value.map((record) => {
      recordNumber++;
      nextLine += 1 + quotedNewlines(record);
      return { rowNumber: recordNumber, values: record.map(cleanCsvCell) };
    });
  };

  let headers: string[] | null = null;
  // The records read with the header row that follow it.
  let afterHeader: TableRow[] = [];
  while (!headers) {
    const read = await nextRecords();
    if (!read) {
      raw.destroy();
      throw new TableFormatError('the file has no header row');
    }
    const at = read.findIndex((record) => !isBlankRow(record.values));
    if (at !== -1) {
      headers = read[at].values;
      afterHeader = read.slice(at + 1);
    }
  }

  async function* batches(): AsyncGenerator<TableRow[]> {
    try {
      for (let read: TableRow[] | null = afterHeader; read; read = await nextRecords()) {
        const rows = read.filter((record) => !isBlankRow(record.values));
        if (rows.length) yield rows;
      }
    } finally {
      raw.destroy();
    }
  }
  const data = batches();
  return { headers, encoding, rows: rowsOf(data), batches: data, close: () => raw.destroy() };
}

/**
 * The records of `parser` (an object-mode stream) in arrays of up to `size`, in order: one promise
 * per array where a stream's own async iterator costs one per record (node's
 * `createAsyncIterator`, which this follows: `read()` until null, then wait for `readable` or the
 * end). Ends with the stream; throws its error. Returning early leaves the stream to its owner.
 */
async function* recordBatches(parser: Readable, size: number): AsyncGenerator<string[][]> {
  let wake = () => {};
  let ended: true | Error | undefined;
  const onReadable = () => wake();
  parser.on('readable', onReadable);
  const cleanup = finished(parser, { writable: false }, (err) => {
    ended = err ?? true;
    wake();
  });
  try {
    for (;;) {
      const batch: string[][] = [];
      for (let record; batch.length < size && (record = parser.destroyed ? null : parser.read()) !== null;) batch.push(record);
      if (batch.length) yield batch;
      else if (ended instanceof Error) throw ended;
      else if (ended) return;
      else await new Promise<void>((resolve) => { wake = resolve; });
    }
  } finally {
    parser.off('readable', onReadable);
    cleanup();
  }
}

/** Trimmed cell, with the `'` of a formula-injection guard removed (so error reports re-upload cleanly). */
function cleanCsvCell(cell: string): string {
  const value = cleanCell(cell);
  return value.charCodeAt(0) === 39 && ESCAPED_FORMULA.test(value) ? value.slice(1) : value;
}

/** The most frequent of comma, semicolon and tab outside quotes in the header line; comma by default. */
export function sniffDelimiter(text: string): string {
  const counts = new Map<string, number>(DELIMITERS.map((d) => [d, 0]));
  let quoted = false;
  for (const ch of text) {
    if (ch === '"') quoted = !quoted;
    else if (!quoted && (ch === '\n' || ch === '\r')) break;
    else if (!quoted && counts.has(ch)) counts.set(ch, counts.get(ch)! + 1);
  }
  let best = ',';
  for (const [d, n] of counts) if (n > counts.get(best)!) best = d;
  return best;
}

function csvError(err: unknown, row: number, line: number): Error {
  if (!(err instanceof CsvError)) return err as Error;
  const where = `row ${row} (starting on line ${line})`;
  switch (err.code) {
    case 'CSV_QUOTE_NOT_CLOSED':
      return new TableFormatError(`${where} opens a quoted field that is never closed (a closing " is missing), so the rest of the file cannot be read`);
    case 'CSV_MAX_RECORD_SIZE':
      return new TableFormatError(`${where} is longer than ${MAX_RECORD_CHARS.toLocaleString('en-US')} characters: a quoted field is never closed, or a cell is far too long (at most BULK_MAX_CELL_CHARS characters per cell)`);
    default:
      return new TableFormatError(`${where} is not valid CSV: ${err.message}`);
  }
}

/** Number of line feeds inside the cells of a record. */
function quotedNewlines(record: string[]): number {
  let count = 0;
  for (let i = 0; i < record.length; i++) {
    for (let at = record[i].indexOf('\n'); at !== -1; at = record[i].indexOf('\n', at + 1)) count++;
  }
  return count;
}
