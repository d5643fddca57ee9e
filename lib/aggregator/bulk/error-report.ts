/**
 * The error report of a bulk upload: a CSV of every row that failed or was skipped, with the
 * report's own columns first (REPORT_COLUMNS) and then the file's original columns, so that the
 * operator can correct the rows and upload the report again (the report columns are then ignored:
 * see `withReportColumnsIgnored`).
 *
 * Cells are protected against formula injection (DESIGN.md "Data rules"; OWASP "CSV Injection"):
 * a cell starting with `=`, `+`, `-`, `@`, tab or CR is prefixed with `'`, except a plain number
 * such as `-12.5` or `+919876543210`, which a spreadsheet reads as a number, never as a formula.
 */
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { stringify } from 'csv-stringify';
import type { PiiCrypto } from '../../platform/crypto.ts';
import type { Queryable } from '../../platform/db.ts';
import { openJson } from './sealed.ts';
import type { Mapping } from './mapping.ts';
import type { FieldError } from './row-coercion.ts';

/** Columns the report adds before the file's own columns. */
export const REPORT_COLUMNS = ['row_number', 'outcome', 'error_fields', 'error_messages'] as const;

// Also the full-width forms some spreadsheets (Apple Numbers) treat alike, as csv-stringify's escape_formulas.
const FORMULA_START = /^[=+\-@\t\r\uFF1D\uFF0B\uFF0D\uFF20]/;
const PLAIN_NUMBER = /^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$/;

/** `value` made safe to open in a spreadsheet (see the module comment). */
export function protectCell(value: string): string {
  return FORMULA_START.test(value) && !PLAIN_NUMBER.test(value) ? `'${value}` : value;
}

/**
 * `columnMap` extended so that header matching ignores the report's own columns when a report is
 * uploaded again: each REPORT_COLUMNS header present in `headers` maps to null, unless the
 * operator's map says otherwise or the domain has a field of that name.
 */
export function withReportColumnsIgnored(headers: string[], columnMap: Mapping | null, fieldNames: Set<string>): Mapping | undefined {
  const extra = REPORT_COLUMNS.filter((c) => headers.includes(c) && !fieldNames.has(c) && !(columnMap && c in columnMap));
  if (extra.length === 0) return columnMap ?? undefined;
  return { ...Object.fromEntries(extra.map((c) => [c, null])), ...columnMap };
}

/** What aggregator.bulk_upload_rows.sealed holds, encrypted (lib/aggregator/bulk/sealed.ts). */
export interface SealedRow {
  cells: string[];
  errors: FieldError[];
}

interface ReportRow {
  row_number: number;
  outcome: 'failed' | 'skipped';
  sealed: string | null;
  // Plaintext of rows written before issue 15 (sealed is then null).
  cells: string[] | null;
  errors: FieldError[] | null;
}

const PAGE_ROWS = 5000;

/**
 * Streams the report of upload `uploadId` as CSV (UTF-8 with a BOM, RFC 4180 quoting, CRLF), reading its
 * failed and skipped rows from aggregator.bulk_upload_rows page by page in row order — never the
 * whole report in memory — and decrypting each with `pii` (the only place they are opened).
 * Rows longer than the header row keep their extra cells at the end.
 */
export function errorReportStream(db: Queryable, pii: PiiCrypto, uploadId: string, headers: string[]): Readable {
  async function* records() {
    yield [...REPORT_COLUMNS, ...headers];
    let after = 0;
    for (;;) {
      const { rows } = await db.query<ReportRow>(
        `SELECT row_number, outcome, sealed, cells, errors FROM aggregator.bulk_upload_rows
          WHERE upload_id = $1 AND row_number > $2 ORDER BY row_number LIMIT $3`, [uploadId, after, PAGE_ROWS]);
      for (const r of rows) {
        const { cells, errors } = r.sealed ? openJson<SealedRow>(pii, r.sealed) : { cells: r.cells ?? [], errors: r.errors ?? [] };
        const fields = [...new Set(errors.map((e) => e.field))];
        const messages = errors.map((e) => (e.message.startsWith(e.field) ? e.message : `${e.field}: ${e.message}`));
        yield [String(r.row_number), r.outcome, fields.join('; '), messages.join('; '), ...cells].map(protectCell);
      }
      if (rows.length < PAGE_ROWS) return;
      after = rows[rows.length - 1].row_number;
    }
  }
  // A BOM, so that Excel opens the report as UTF-8 (as the CSV template).
  const csv = stringify({ record_delimiter: 'windows', bom: true });
  // pipeline destroys `csv` with any error of the query, so whoever reads the report sees it.
  pipeline(Readable.from(records()), csv).catch(() => {});
  return csv;
}
