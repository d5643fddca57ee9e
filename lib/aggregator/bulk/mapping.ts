/**
 * The mapping of a bulk upload: how a spreadsheet's columns become the fields of a participant
 * (issue 17, docs/decisions.md "Bulk onboarding II"). One JSON object mixing two kinds of entries:
 *
 * - a file header → a schema field name, or null to ignore the column (the original `column_map`);
 * - a schema field name → a field spec, one of
 *   - `{"column": "INSTNM"}`                                  the column's value;
 *   - `{"columns": ["ADDR", "CITY"], "join": ", "}`          several columns joined, blanks skipped (join default ", ");
 *   - `{"value": "Education"}`                                a constant for every row;
 *   - `{"column": "SECTOR", "map": {"1": "Education", "99": null}, "default": "Education"}`
 *       the value looked up after trimming and case-folding; null = empty; a value not in the map
 *       fails the row (naming it and the mapped ones) unless `default` is given;
 *   - `{"column": "SKILLS", "split": ";"}`                    an array field split on `;` (also with `map`, per item).
 *
 * An entry whose value is an object is a field spec (its key must be a field); a string or null
 * value is a header entry. `parseMapping` checks a mapping against the participant schema when an
 * upload or a saved mapping is created (parse-mapping.ts); the columns are checked against the file's header once it
 * is read (lib/aggregator/bulk/header-match.ts).
 */
/** One field's spec (see the module comment). */
export interface FieldSpec {
  column?: string;
  columns?: string[];
  join?: string;
  value?: unknown;
  map?: Record<string, string | null>;
  default?: string | null;
  split?: string;
}

/** A mapping as stored with a job or a saved mapping: header → field | null, or field → spec. */
export type Mapping = Record<string, string | null | FieldSpec>;

/**
 * A mapping problem: `field` is the schema field whose spec is wrong, or null when the problem is
 * with the mapping as a whole or a header entry; `message` says what is wrong, naming the entry.
 */
export class MappingError extends Error {
  constructor(readonly field: string | null, message: string) {
    super(message);
  }
}

export const DEFAULT_JOIN = ', ';

/** The field specs of `mapping` (entries whose value is an object). */
export function fieldSpecs(mapping: Mapping | null | undefined): Map<string, FieldSpec> {
  const specs = new Map<string, FieldSpec>();
  for (const [key, value] of Object.entries(mapping ?? {})) {
    if (value !== null && typeof value === 'object') specs.set(key, value);
  }
  return specs;
}

/** The header entries of `mapping` (file header → field or null). */
export function headerEntries(mapping: Mapping | null | undefined): Record<string, string | null> {
  const entries: Record<string, string | null> = {};
  for (const [key, value] of Object.entries(mapping ?? {})) {
    if (value === null || typeof value === 'string') entries[key] = value;
  }
  return entries;
}

/** The key under which a value-map entry is looked up: trimmed and case-folded. */
export function mapKey(raw: string): string {
  return raw.trim().toLowerCase();
}
