/**
 * CSV tables, streamed through csv-parse (RFC 4180 quoting, quoted newlines, CRLF/LF/CR).
 *
 * The encoding is chosen for the whole file first (lib/bulk/encoding.ts, a pass over a first
 * stream); a second stream is decoded (iconv-lite for UTF-16 and Windows-1252) and parsed. The
 * delimiter — comma, semicolon or tab — is sniffed from the header line. csv-parse runs in a
 * worker thread of its own per table (`parseInThread`, csv-parse-thread.js), so that a large
 * upload's staging parses on one core while it coerces, hashes and looks rows up on the other.
 */
import { pipeline, type Readable, type Transform } from 'node:stream';
import { Worker } from 'node:worker_threads';
import type { Options as CsvParseOptions } from 'csv-parse';
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

  const options = {
    bom: true,
    delimiter,
    record_delimiter: ['\r\n', '\n', '\r'],
    relax_quotes: true,
    relax_column_count: true,
    skip_empty_lines: false,
    max_record_size: MAX_RECORD_CHARS,
  };
  async function* replay(): AsyncGenerator<Buffer | string> {
    yield* head;
    for (let next = await source.next(); !next.done; next = await source.next()) yield next.value;
  }
  const parsing = parseInThread(replay(), options, ROW_BATCH);
  const records = parsing.batches;
  const close = () => {
    parsing.stop();
    raw.destroy();
  };

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
  try {
    while (!headers) {
      const read = await nextRecords();
      if (!read) throw new TableFormatError('the file has no header row');
      const at = read.findIndex((record) => !isBlankRow(record.values));
      if (at !== -1) {
        headers = read[at].values;
        afterHeader = read.slice(at + 1);
      }
    }
  } catch (err) {
    close();
    throw err;
  }

  async function* batches(): AsyncGenerator<TableRow[]> {
    try {
      for (let read: TableRow[] | null = afterHeader; read; read = await nextRecords()) {
        const rows = read.filter((record) => !isBlankRow(record.values));
        if (rows.length) yield rows;
      }
    } finally {
      close();
    }
  }
  const data = batches();
  return { headers, encoding, rows: rowsOf(data), batches: data, close };
}

/** csv-parse's CsvError as the parser thread reports it: its code (e.g. CSV_QUOTE_NOT_CLOSED) and message. */
class ThreadCsvError extends Error {
  constructor(readonly code: string | undefined, message: string) {
    super(message);
  }
}

/** What the CSV parser thread (csv-parse-thread.js) sends. */
type ThreadMessage = { records: string[][] } | { written: true } | { end: true } | { error: { code?: string; message: string } };

/** Chunks of text sent to the parser thread and not yet parsed: enough to keep it busy, few to hold. */
const CHUNKS_IN_FLIGHT = 2;
/** Arrays of records parsed and not yet taken beyond which no more text is sent. */
const BATCHES_AHEAD = 4;

/**
 * The records of `text` (chunks of a CSV file's text, in order) parsed by csv-parse with `options`
 * in a worker thread (csv-parse-thread.js), in arrays of up to `size`, in order: the parse, about a
 * third of a large upload's staging, runs on another core than the rows' coercion, hashing and
 * lookups. `text` is read ahead of the arrays taken by at most CHUNKS_IN_FLIGHT chunks in the
 * thread and BATCHES_AHEAD arrays parsed, so memory stays bounded whatever the file's size.
 * `batches` throws csv-parse's error as ThreadCsvError (same code and message) for malformed CSV,
 * and the error of `text` itself; `stop()` (or the end of `batches`) ends the thread.
 */
function parseInThread(text: AsyncIterable<Buffer | string>, options: CsvParseOptions, size: number) {
  // execArgv []: not the parent's `--import tsx` (the thread module is plain JavaScript). unref: an
  // abandoned table never keeps the process alive.
  const thread = new Worker(new URL('./csv-parse-thread.js', import.meta.url), { execArgv: [], workerData: { options, batch: size } });
  thread.unref();
  const chunks = text[Symbol.asyncIterator]();
  const queue: ThreadMessage[] = [];
  let queuedBatches = 0;
  let inFlight = 0;
  let sent = false; // the whole text
  let pumping = false;
  let failure: Error | undefined;
  let wake = () => {};

  /** Sends the next chunks while the thread and the queue have room; runs beside the reader. */
  const pump = async () => {
    if (pumping) return;
    pumping = true;
    try {
      while (!sent && !failure && inFlight < CHUNKS_IN_FLIGHT && queuedBatches < BATCHES_AHEAD) {
        const next = await chunks.next();
        if (next.done) {
          sent = true;
          thread.postMessage({ end: true });
        } else if (typeof next.value === 'string') {
          inFlight++;
          thread.postMessage({ chunk: next.value });
        } else {
          // A copy of the chunk's bytes alone, handed over: a Buffer may view a larger pooled
          // ArrayBuffer, all of which postMessage would copy.
          const bytes = Uint8Array.prototype.slice.call(next.value);
          inFlight++;
          thread.postMessage({ chunk: bytes }, [bytes.buffer]);
        }
      }
    } catch (err) {
      failure ??= err as Error;
      wake();
    } finally {
      pumping = false;
    }
  };
  thread.on('message', (message: ThreadMessage) => {
    if ('written' in message) {
      inFlight--;
      void pump();
      return;
    }
    if ('records' in message) queuedBatches++;
    queue.push(message);
    wake();
  });
  thread.on('error', (err) => {
    failure ??= err;
    wake();
  });
  thread.on('exit', (code) => {
    failure ??= new Error(`the CSV parser thread exited (code ${code})`);
    wake();
  });
  const stop = () => {
    failure ??= new Error('the CSV parser thread was stopped'); // and the pump with it
    thread.removeAllListeners('exit');
    void thread.terminate();
  };

  async function* batches(): AsyncGenerator<string[][]> {
    try {
      void pump();
      for (;;) {
        const message = queue.shift();
        if (!message) {
          if (failure) throw failure;
          await new Promise<void>((resolve) => { wake = resolve; });
        } else if ('records' in message) {
          queuedBatches--;
          void pump();
          yield message.records;
        } else if ('end' in message) {
          return;
        } else if ('error' in message) {
          throw new ThreadCsvError(message.error.code, message.error.message);
        }
      }
    } finally {
      stop();
    }
  }
  return { batches: batches(), stop };
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
  if (!(err instanceof ThreadCsvError)) return err as Error;
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
