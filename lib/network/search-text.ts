/**
 * The searchable text of an item: one `label: value` line per field its domain marks
 * `x-vectorize`, in schema order (arrays joined with ", "). The search service embeds this text;
 * signals' native discover matches words against it.
 */
import type { Domain } from './config.ts';

/** Builds the text for `state` under `domain`; fields without a value are left out. */
export function searchText(domain: Domain, state: Record<string, unknown>): string {
  const lines: string[] = [];
  for (const field of domain.fields) {
    if (!field.vectorize) continue;
    const value = state[field.name];
    if (value === undefined || value === null || value === '') continue;
    const text = Array.isArray(value) ? value.map(String).join(', ') : String(value);
    if (text.trim()) lines.push(`${field.label}: ${text.trim()}`);
  }
  return lines.join('\n');
}
