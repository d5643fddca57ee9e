/**
 * Matching a table's header row to the fields of a participant schema, so that spreadsheets not
 * made from our template can be onboarded.
 *
 * A header matches a field by, in order of precedence: its exact field name; the name, its label
 * (`title`) or the label without a parenthesis ("Expected monthly salary (INR)") compared without
 * case, spaces, punctuation or accents (`Full Name`, `full_name`, `FULL-NAME`); a common alias of
 * an identity or location field (`mobile`, `e-mail address`, `lat`, `lng`, `lon`, `long`). A
 * `columnMap` entry (file header → field, or null to ignore the column) overrides all of these, and
 * a field spec (lib/aggregator/bulk/mapping.ts) gives its field from the columns it names, which
 * are then not matched to any other field. Headers that match nothing are ignored and listed in `ignored`.
 */
import type { Domain, FieldInfo } from '../../network/config.ts';
import { fieldSpecs, headerEntries, type FieldSpec, type Mapping } from './mapping.ts';
import { columnLetter, TableFormatError } from './table.ts';

export interface ColumnMapping {
  /** Mapped columns: 0-based `index` into a row's values, the file's `header` text, the schema `field`. */
  columns: { index: number; header: string; field: string }[];
  /** Headers not mapped to any field (unknown, or mapped to null in the column map), in file order. */
  ignored: string[];
  /** Number of header cells; the row coercer reports non-empty cells beyond it. */
  width?: number;
  /** 0-based indexes of empty header cells; the row coercer reports non-empty cells under them. */
  unnamed?: number[];
  /** Fields given by a field spec of the mapping (constant, joined, value-mapped or split columns). */
  derived?: DerivedField[];
}

/** A field spec with its columns found in the header: `indexes` in the order of the spec's columns. */
export interface DerivedField {
  field: string;
  spec: FieldSpec;
  indexes: number[];
  headers: string[];
}

const ALIASES: Record<string, string[]> = {
  'identity:name': ['fullname'],
  'identity:phone': ['mobile', 'mobileno', 'mobilenumber', 'phone', 'phoneno', 'phonenumber', 'contactnumber', 'contactno'],
  'identity:email': ['email', 'emailaddress', 'emailid', 'mail'],
  'location:latitude': ['lat', 'latitude'],
  'location:longitude': ['lng', 'lon', 'long', 'longitude'],
};
const MAX_LISTED = 20;

/** A header or label compared without case, accents, spaces or punctuation: `Full-Name` → `fullname`. */
export function normalizeHeader(text: string): string {
  return text.normalize('NFKD').replace(/\p{M}/gu, '').toLowerCase().replace(/[^\p{L}\p{N}]+/gu, '');
}

/**
 * Maps `headers` (trimmed, in file order) to the fields of `domain`, with `columnMap` (header
 * entries and field specs, lib/aggregator/bulk/mapping.ts) overriding; fields with a spec count as
 * present.
 * @throws TableFormatError when `columnMap` names a field the schema does not have or a column the
 *   file does not have (in a header entry or a spec), when two columns map to one field (naming both), when no column is known,
 *   or when required fields (the schema's `required`) have no column (naming them).
 */
export function matchHeaders(domain: Domain, headers: string[], columnMap?: Mapping | null): ColumnMapping {
  const fields = new Map(domain.fields.map((f) => [f.name, f]));
  const known = knownHeaders(domain.fields);
  const overrides = columnMapOverrides(domain, fields, headers, headerEntries(columnMap));
  const derived: DerivedField[] = [];
  const consumed = new Set<number>();
  for (const [field, spec] of fieldSpecs(columnMap)) {
    if (!fields.has(field)) throw new TableFormatError(`the mapping has a spec for "${field}", which is not a field of ${domain.name} participants`);
    const names = spec.columns ?? (spec.column !== undefined ? [spec.column] : []);
    const indexes = names.map((name) => {
      const index = headerIndex(headers, name);
      if (index === -1) {
        throw new TableFormatError(`the mapping of ${field} names the column "${name}", which is not in the file's header row (${list(headers.filter(Boolean).map((h) => `"${h}"`))})`);
      }
      return index;
    });
    for (const index of indexes) consumed.add(index);
    derived.push({ field, spec, indexes, headers: indexes.map((i) => headers[i]) });
  }
  const byField = new Map<string, number>();
  const derivedFields = new Set(derived.map((d) => d.field));

  const columns: ColumnMapping['columns'] = [];
  const ignored: string[] = [];
  const unnamed: number[] = [];
  headers.forEach((header, index) => {
    if (consumed.has(index) && !overrides.has(index)) return;
    if (header === '' && !overrides.has(index)) {
      unnamed.push(index);
      return;
    }
    const field = overrides.has(index) ? overrides.get(index)! : (fields.has(header) ? header : known.get(normalizeHeader(header)) ?? null);
    if (field === null || (derivedFields.has(field) && !overrides.has(index))) {
      ignored.push(header);
      return;
    }
    const other = byField.get(field);
    if (other !== undefined) {
      throw new TableFormatError(`the columns "${headers[other]}" (column ${columnLetter(other)}) and "${header}" (column ${columnLetter(index)}) both map to the field ${field}; `
        + 'remove one of them, or map one to null in column_map');
    }
    byField.set(field, index);
    columns.push({ index, header, field });
  });

  if (columns.length === 0 && !derived.some((d) => d.indexes.length > 0)) {
    throw new TableFormatError(`none of the file's columns (${list(headers.filter(Boolean).map((h) => `"${h}"`))}) matches a field of ${domain.name} participants; `
      + `the header row must name the fields (${list(domain.fields.map((f) => f.name))}) or their labels, or map the columns with column_map`);
  }
  const missing = domain.fields.filter((f) => f.required && !byField.has(f.name) && !derivedFields.has(f.name));
  if (missing.length > 0) {
    throw new TableFormatError(`required ${missing.length === 1 ? 'column is' : 'columns are'} missing: ${missing.map((f) => f.label === f.name ? f.name : `${f.name} (${f.label})`).join(', ')}; `
      + 'add them, or map your own columns to them with column_map');
  }
  return { columns, ignored, width: headers.length, unnamed, derived };
}

/** The names a header may give `field` by (name, label, label without parenthesis, aliases), normalised. */
export function fieldNamesOf(field: FieldInfo): string[] {
  const aliases = [...(field.identity ? ALIASES[`identity:${field.identity}`] : []), ...(field.location ? ALIASES[`location:${field.location}`] : [])];
  return [...new Set([normalizeHeader(field.name), normalizeHeader(field.label), normalizeHeader(field.label.replace(/\([^()]*\)/g, '')), ...aliases])].filter(Boolean);
}

/** Normalised header text → field name, by precedence (name, label, label without parenthesis, alias); ambiguous keys are left out. */
export function knownHeaders(fields: FieldInfo[]): Map<string, string> {
  const best = new Map<string, { field: string | null; rank: number }>();
  const offer = (key: string, field: string, rank: number) => {
    if (!key) return;
    const current = best.get(key);
    if (!current || rank < current.rank) best.set(key, { field, rank });
    else if (rank === current.rank && current.field !== field) current.field = null;
  };
  for (const f of fields) {
    offer(normalizeHeader(f.name), f.name, 0);
    offer(normalizeHeader(f.label), f.name, 1);
    offer(normalizeHeader(f.label.replace(/\([^()]*\)/g, '')), f.name, 2);
    const aliases = [...(f.identity ? ALIASES[`identity:${f.identity}`] : []), ...(f.location ? ALIASES[`location:${f.location}`] : [])];
    for (const alias of aliases) offer(alias, f.name, 3);
  }
  const known = new Map<string, string>();
  for (const [key, { field }] of best) if (field) known.set(key, field);
  return known;
}

/** Column index → field (or null: ignore) from `columnMap`, whose keys are matched to headers exactly, else normalised. */
function columnMapOverrides(domain: Domain, fields: Map<string, FieldInfo>, headers: string[], columnMap: Record<string, string | null>): Map<number, string | null> {
  const overrides = new Map<number, string | null>();
  for (const [key, field] of Object.entries(columnMap)) {
    if (field !== null && !fields.has(field)) {
      throw new TableFormatError(`column_map maps "${key}" to "${field}", which is not a field of ${domain.name} participants (fields: ${list([...fields.keys()])})`);
    }
    const index = headerIndex(headers, key);
    if (index === -1) {
      throw new TableFormatError(`column_map names the column "${key}", which is not in the file's header row (${list(headers.filter(Boolean).map((h) => `"${h}"`))})`);
    }
    overrides.set(index, field);
  }
  return overrides;
}

/** The index of the header `name` (exact, else compared normalised), or -1. */
function headerIndex(headers: string[], name: string): number {
  const index = headers.indexOf(name.trim());
  if (index !== -1) return index;
  const normalized = normalizeHeader(name);
  return normalized ? headers.findIndex((h) => normalizeHeader(h) === normalized) : -1;
}

function list(items: string[]): string {
  return items.length > MAX_LISTED ? `${items.slice(0, MAX_LISTED).join(', ')}, … (${items.length} in all)` : items.join(', ');
}
