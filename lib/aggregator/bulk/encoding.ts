/**
 * Choosing the text encoding of an uploaded CSV file, for the whole file, before it is parsed.
 *
 * One pass over the stream (constant memory): a byte-order mark decides (UTF-8, UTF-16 LE/BE);
 * UTF-16 without a mark is recognised by its zero bytes; otherwise the whole stream is validated
 * as UTF-8 (Node's `buffer.isUtf8`, simdutf-fast). A file that is not UTF-8 is read as
 * Windows-1252 (a superset of Latin-1's printable characters) — unless that would garble it:
 * valid UTF-8 sequences mixed with other bytes, bytes Windows-1252 leaves undefined, or the
 * paired high bytes of a multi-byte encoding (Shift_JIS, GBK, …) make it a TableFormatError.
 */
import { isAscii, isUtf8 } from 'node:buffer';
import { Readable } from 'node:stream';
import { TableFormatError } from './table.ts';

export type TextEncoding = 'utf-8' | 'utf-16le' | 'utf-16be' | 'windows-1252';

export interface DetectedEncoding {
  encoding: TextEncoding;
  /** Whether the file starts with a byte-order mark (the CSV parser strips it). */
  bom: boolean;
  /** True when the file has no bytes, or only a byte-order mark. */
  empty: boolean;
}

const HEAD_BYTES = 4096;
/** Bytes Windows-1252 leaves undefined (iconv-lite would turn them into U+FFFD). */
const CP1252_UNDEFINED = new Set([0x81, 0x8d, 0x8f, 0x90, 0x9d]);

/**
 * Reads `stream` to its end (or, for UTF-16, just its head) and decides its encoding. Keeps no
 * chunk (copies what it keeps), so the chunks may be one reused buffer (ObjectStorage.scan).
 * @throws TableFormatError when the file contains NUL bytes outside UTF-16, or its encoding
 *   cannot be determined without garbling text (the message names the line and the problem).
 */
export async function detectEncoding(stream: AsyncIterable<Buffer>): Promise<DetectedEncoding> {
  let head = Buffer.alloc(0);
  let scan: Utf8Scan | null = null;
  let bom = false;
  let total = 0;
  try {
    for await (const chunk of stream) {
      total += chunk.length;
      if (scan) {
        scan.push(chunk);
        continue;
      }
      head = Buffer.concat([head, chunk]);
      if (head.length < HEAD_BYTES) continue;
      const decided = fromHead(head);
      if (decided) return decided;
      bom = hasUtf8Bom(head);
      scan = new Utf8Scan(bom);
      scan.push(head);
    }
    if (!scan) {
      const decided = fromHead(head);
      if (decided) return decided;
      bom = hasUtf8Bom(head);
      scan = new Utf8Scan(bom);
      scan.push(head);
    }
    return { encoding: scan.finish(), bom, empty: total === (bom ? 3 : 0) };
  } finally {
    // A stream is released however the pass ends (an iterator is closed by leaving the loop).
    if (stream instanceof Readable) stream.destroy();
  }
}

function hasUtf8Bom(head: Buffer): boolean {
  return head[0] === 0xef && head[1] === 0xbb && head[2] === 0xbf;
}

/** The decision a file's first bytes allow on their own (UTF-16 mark or zero bytes, no bytes), or null. */
function fromHead(head: Buffer): DetectedEncoding | null {
  if (head.length === 0) return { encoding: 'utf-8', bom: false, empty: true };
  if (head[0] === 0xff && head[1] === 0xfe) return { encoding: 'utf-16le', bom: true, empty: head.length === 2 };
  if (head[0] === 0xfe && head[1] === 0xff) return { encoding: 'utf-16be', bom: true, empty: head.length === 2 };
  const utf16 = utf16WithoutBom(head);
  return utf16 ? { encoding: utf16, bom: false, empty: false } : null;
}

/** UTF-16 LE/BE recognised without a byte-order mark: text of mostly Latin characters has a zero in every other byte (null: not UTF-16). */
export function utf16WithoutBom(head: Buffer): TextEncoding | null {
  const pairs = Math.floor(Math.min(head.length, HEAD_BYTES) / 2);
  if (pairs < 2) return null;
  let evenZero = 0;
  let oddZero = 0;
  for (let i = 0; i < pairs * 2; i += 2) {
    if (head[i] === 0) evenZero++;
    if (head[i + 1] === 0) oddZero++;
  }
  if (oddZero >= pairs * 0.4 && evenZero <= pairs * 0.05) return 'utf-16le';
  if (evenZero >= pairs * 0.4 && oddZero <= pairs * 0.05) return 'utf-16be';
  return null;
}

/**
 * Streaming UTF-8 validation; after the first invalid byte, a byte-level scan that gathers the
 * evidence for or against Windows-1252. Lines are counted for messages (1-based).
 */
class Utf8Scan {
  private line = 1;
  private carry: Buffer | null = null;
  /** Line of the first non-ASCII UTF-8 sequence seen while the file still looked like UTF-8 (0: none). */
  private utf8Line = 0;
  private legacy: LegacyScan | null = null;

  constructor(private readonly bomPromisedUtf8 = false) {}

  push(chunk: Buffer): void {
    if (this.legacy) {
      this.legacy.push(chunk);
      return;
    }
    const data = this.carry ? Buffer.concat([this.carry, chunk]) : chunk;
    const cut = completeLength(data);
    const complete = data.subarray(0, cut);
    this.carry = cut < data.length ? Buffer.from(data.subarray(cut)) : null;
    if (isUtf8(complete)) {
      this.checkNul(complete);
      if (!this.utf8Line && !isAscii(complete)) this.utf8Line = this.line + countLines(complete, firstNonAscii(complete));
      this.line += countLines(complete, complete.length);
      return;
    }
    this.legacy = new LegacyScan(this.line, this.utf8Line, this.bomPromisedUtf8);
    this.legacy.push(data);
    this.carry = null;
  }

  finish(): TextEncoding {
    if (this.legacy) return this.legacy.finish();
    if (this.carry) {
      // The file ends inside a multi-byte sequence.
      this.legacy = new LegacyScan(this.line, this.utf8Line, this.bomPromisedUtf8);
      this.legacy.push(this.carry);
      return this.legacy.finish();
    }
    return 'utf-8';
  }

  private checkNul(buf: Buffer): void {
    const at = buf.indexOf(0);
    if (at !== -1) throw nulError(this.line + countLines(buf, at));
  }
}

/** Byte-level evidence once a file is known not to be UTF-8 (see the module comment). */
class LegacyScan {
  private need = 0;
  private invalidLine = 0;
  private high = 0;
  private pairedHigh = 0;
  private prevHigh = false;
  private undefinedByte = -1;
  private undefinedLine = 0;

  constructor(private line: number, private utf8Line: number, private readonly bomPromisedUtf8: boolean) {}

  push(buf: Buffer): void {
    for (let i = 0; i < buf.length; i++) {
      const b = buf[i];
      if (this.need > 0) {
        if (b >= 0x80 && b <= 0xbf) {
          this.high++;
          this.pairedHigh++;
          if (--this.need === 0) this.utf8Line ||= this.line;
          continue;
        }
        this.need = 0;
        this.invalidLine ||= this.line;
      }
      if (b < 0x80) {
        this.prevHigh = false;
        if (b === 0x0a) this.line++;
        else if (b === 0) throw nulError(this.line);
        continue;
      }
      this.high++;
      if (this.prevHigh) this.pairedHigh++;
      this.prevHigh = true;
      if (CP1252_UNDEFINED.has(b) && this.undefinedByte === -1) {
        this.undefinedByte = b;
        this.undefinedLine = this.line;
      }
      if (b >= 0xc2 && b <= 0xdf) this.need = 1;
      else if (b >= 0xe0 && b <= 0xef) this.need = 2;
      else if (b >= 0xf0 && b <= 0xf4) this.need = 3;
      else this.invalidLine ||= this.line;
    }
  }

  finish(): TextEncoding {
    if (this.need > 0) this.invalidLine ||= this.line;
    const fix = 'Save the file as "CSV UTF-8" and upload it again.';
    if (this.bomPromisedUtf8) {
      throw new TableFormatError(`the file starts with a UTF-8 byte-order mark, but line ${this.invalidLine} is not valid UTF-8. ${fix}`);
    }
    if (this.utf8Line) {
      throw new TableFormatError(`the file mixes text encodings: line ${this.utf8Line} is UTF-8 but line ${this.invalidLine} is not, so its text cannot be read reliably. ${fix}`);
    }
    if (this.high >= 20 && this.pairedHigh / this.high > 0.4) {
      throw new TableFormatError(`the file's text encoding is not supported: it is not UTF-8, UTF-16 or Windows-1252 (from line ${this.invalidLine} it looks like a multi-byte encoding such as Shift_JIS, GBK or EUC-KR). ${fix}`);
    }
    if (this.undefinedByte !== -1) {
      throw new TableFormatError(`the file is neither UTF-8 nor Windows-1252 text: line ${this.undefinedLine} has byte 0x${this.undefinedByte.toString(16).toUpperCase()}, which is not a character in Windows-1252. ${fix}`);
    }
    return 'windows-1252';
  }
}

function nulError(line: number): TableFormatError {
  return new TableFormatError(`line ${line} contains a NUL byte: the file is not a text (CSV) file in UTF-8, UTF-16 or Windows-1252`);
}

/** Length of `buf` without a multi-byte UTF-8 sequence cut off at its end. */
function completeLength(buf: Buffer): number {
  const n = buf.length;
  for (let back = 1; back <= Math.min(3, n); back++) {
    const b = buf[n - back];
    if (b < 0x80) return n;
    if (b >= 0xc0) {
      const len = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : 2;
      return len > back ? n - back : n;
    }
  }
  return n;
}

function firstNonAscii(buf: Buffer): number {
  for (let i = 0; i < buf.length; i++) if (buf[i] >= 0x80) return i;
  return buf.length;
}

/** Number of `\n` bytes in `buf[0, end)`. */
function countLines(buf: Buffer, end: number): number {
  let count = 0;
  for (let i = buf.indexOf(0x0a); i !== -1 && i < end; i = buf.indexOf(0x0a, i + 1)) count++;
  return count;
}
