/** Matching a table's header row to the fields of a participant schema. */
import type { Domain } from '../network.ts';
import { TableFormatError } from './table.ts';

export interface ColumnMapping {
  /** Mapped columns: 0-based `index` into a row's values, the file's `header` text, the schema `field`. */
  columns: { index: number; header: string; field: string }[];
  /** Headers not mapped to any field (unknown, or mapped to null in the column map). */
  ignored: string[];
}

/** @throws TableFormatError naming the missing required columns, or saying no column is known. */
export function matchHeaders(_domain: Domain, _headers: string[], _columnMap?: Record<string, string | null>): ColumnMapping {
  throw new TableFormatError('header matching is not implemented yet');
}
