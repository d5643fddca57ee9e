/**
 * Recognising an uploaded file's table format by its content, not its name or declared type.
 *
 * - XLSX: a ZIP (local file header `PK\x03\x04`) with an entry under `xl/` among the entries that
 *   start within the head (Excel, LibreOffice, Google Sheets and exceljs all store `xl/…` entries
 *   within the first few kilobytes; a .docx or .ods has none).
 * - CSV: text — a UTF-8/UTF-16 byte-order mark, UTF-16 without one, or bytes without NUL and with
 *   almost no control characters (UTF-8 and Windows-1252 alike; lib/bulk/encoding.ts decides which).
 * - Anything else (PDF, legacy .xls and password-protected workbooks `D0 CF 11 E0`, images,
 *   archives) is null.
 */
import { utf16WithoutBom } from './encoding.ts';
import type { TableFormat } from './table.ts';

/** How many leading bytes `detectTableFormat` wants (fewer work for small files). */
export const FORMAT_SNIFF_BYTES = 64 * 1024;

const ZIP_LOCAL_HEADER = Buffer.from('PK\x03\x04', 'latin1');
const MAGIC: { bytes: number[]; what: string }[] = [
  { bytes: [0x25, 0x50, 0x44, 0x46], what: 'a PDF document' },
  { bytes: [0xd0, 0xcf, 0x11, 0xe0], what: 'an Excel 97-2003 (.xls) workbook or a password-protected file' },
  { bytes: [0x89, 0x50, 0x4e, 0x47], what: 'a PNG image' },
  { bytes: [0xff, 0xd8, 0xff], what: 'a JPEG image' },
  { bytes: [0x47, 0x49, 0x46, 0x38], what: 'a GIF image' },
  { bytes: [0x1f, 0x8b], what: 'a gzip archive' },
  { bytes: [0x50, 0x4b, 0x03, 0x04], what: 'a ZIP archive that is not an XLSX workbook' },
];

/**
 * The table format of a file from its first bytes (`head`, ideally `FORMAT_SNIFF_BYTES` of them
 * or the whole file when smaller): 'csv', 'xlsx', or null for anything else. An empty head is
 * 'csv' (reading it then fails with "the file is empty").
 */
export function detectTableFormat(head: Buffer): TableFormat | null {
  if (startsWith(head, ZIP_LOCAL_HEADER)) return hasXlEntry(head) ? 'xlsx' : null;
  if (MAGIC.some((m) => startsWith(head, m.bytes))) return null;
  if (startsWith(head, [0xef, 0xbb, 0xbf]) || startsWith(head, [0xff, 0xfe]) || startsWith(head, [0xfe, 0xff])) return 'csv';
  if (utf16WithoutBom(head)) return 'csv';
  let control = 0;
  for (let i = 0; i < head.length; i++) {
    const b = head[i];
    if (b === 0) return null;
    // Tab, LF, VT, FF, CR and SUB (an old end-of-file mark) occur in text files.
    if (b < 0x20 && b !== 0x09 && b !== 0x0a && b !== 0x0b && b !== 0x0c && b !== 0x0d && b !== 0x1a) control++;
  }
  return control <= head.length / 100 ? 'csv' : null;
}

/** A sentence for the operator saying why a file with this head cannot be read as a table. */
export function unsupportedFileMessage(head: Buffer): string {
  if (startsWith(head, OLE_MAGIC)) {
    // An OLE container's directory names its streams in UTF-16LE, usually within the head: an
    // encrypted OOXML package has EncryptedPackage, a legacy workbook Workbook (or Book).
    if (head.includes(ENCRYPTED_PACKAGE)) {
      return 'the file is a password-protected workbook, which cannot be read; remove the password in Excel (File › Info › Protect Workbook › Encrypt with Password, then clear it), save, and upload it again, or upload a CSV';
    }
    if (head.includes(LEGACY_WORKBOOK) || head.includes(LEGACY_BOOK)) {
      return 'the file is an Excel 97-2003 (.xls) workbook, whatever its name says; open it in Excel or LibreOffice, save it as an Excel .xlsx workbook or as CSV, and upload that';
    }
  }
  const known = MAGIC.find((m) => startsWith(head, m.bytes));
  const nul = head.indexOf(0);
  if (!known && nul !== -1) {
    // Text with NUL bytes: most often a CSV saved damaged, or a binary file renamed .csv.
    return `the file holds a NUL byte (0x00) at byte ${(nul + 1).toLocaleString('en-US')}, which no CSV text has: it is damaged or not a CSV; open it in Excel or LibreOffice and save it as "CSV UTF-8", or upload an Excel .xlsx workbook`;
  }
  return `the file is ${known?.what ?? 'not a CSV or XLSX file'}; upload a CSV file or an Excel .xlsx workbook`;
}

const OLE_MAGIC = [0xd0, 0xcf, 0x11, 0xe0];
const ENCRYPTED_PACKAGE = Buffer.from('EncryptedPackage', 'utf16le');
const LEGACY_WORKBOOK = Buffer.from('Workbook\u0000', 'utf16le');
const LEGACY_BOOK = Buffer.from('Book\u0000', 'utf16le');

/** Whether a ZIP head holds a local file header whose entry name starts with `xl/`. */
function hasXlEntry(head: Buffer): boolean {
  for (let at = head.indexOf(ZIP_LOCAL_HEADER); at !== -1; at = head.indexOf(ZIP_LOCAL_HEADER, at + 4)) {
    if (at + 30 > head.length) break;
    const nameLength = head.readUInt16LE(at + 26);
    const name = head.toString('latin1', at + 30, Math.min(at + 30 + nameLength, head.length));
    if (name.startsWith('xl/')) return true;
  }
  return false;
}

function startsWith(head: Buffer, bytes: ArrayLike<number>): boolean {
  if (head.length < bytes.length) return false;
  for (let i = 0; i < bytes.length; i++) if (head[i] !== bytes[i]) return false;
  return true;
}
