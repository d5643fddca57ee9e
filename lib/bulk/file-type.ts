/** Recognising an uploaded file's table format from its first bytes. */
import type { TableFormat } from './table.ts';

/** 'csv', 'xlsx', or null for anything else (PDF, legacy .xls, images, other ZIPs). */
export function detectTableFormat(_head: Buffer): TableFormat | null {
  return null;
}
