/**
 * Turning one table row into a typed, validated participant: cells are coerced by the schema's
 * field kinds (lib/network.ts FieldInfo), then the profile is validated with the domain's compiled
 * Ajv validator (allErrors), and every problem of the row is reported, one FieldError per field.
 *
 * Coercion rules (an empty cell is an absent field):
 * - number: `12`, `-0.5`, `1e3`, thousands grouped with commas (`1,234.5`, Indian `1,23,456`), or
 *   one decimal comma when it cannot be a grouping (`29,657368` → 29.657368, but `1,234` → 1234);
 *   anything else (`12abc`, `1 234`, `0x10`) is an error. integer: a number without fraction.
 * - boolean: true/false, yes/no, y/n, 1/0 (any case; Excel's TRUE/FALSE).
 * - enum: matched without case, spaces or punctuation, stored in its canonical spelling
 *   (`transport / admin` → `Transport/Admin`, `Tamilnadu` → `Tamil Nadu`).
 * - array: split on the network's `csv_array_delimiter`, items trimmed, empty items dropped,
 *   each item coerced by the item kind.
 * - phone (`x-identity: phone`): E.164 through libphonenumber-js with the `max` metadata (precise
 *   per-country number plans), `network.defaultPhoneRegion` for numbers without a country code.
 * - e-mail (`x-identity: email`): lower-cased.
 *
 * Before any of this, a value longer than its field's cap (`rawValueCap`) is an error, found
 * without reading the value, so that no cell or form value costs more than the cap's work
 * (docs/decisions.md, "Linear-time input").
 */
import type { ErrorObject } from 'ajv';
import { parsePhoneNumberFromString, type CountryCode } from 'libphonenumber-js/max';
import type { Domain, FieldInfo, FieldKind, Network } from '../../network/config.ts';
import { normalizeHeader, type ColumnMapping, type DerivedField } from './header-match.ts';
import { DEFAULT_JOIN, mapKey } from './mapping.ts';
import { columnLetter } from './table.ts';

export interface FieldError {
  field: string;
  message: string;
}

export interface CoercedParticipant {
  /** Every mapped field with a value, typed per schema (identity fields included). */
  profile: Record<string, unknown>;
  /** Phone in E.164, e-mail lower-cased. */
  identity: { name?: string; phone?: string; email?: string };
  /** The x-external-id field's value. */
  externalId?: string;
  /** From the x-location fields when both are present. */
  locations: { lat: number; lng: number; label?: string }[];
}

/**
 * A row coerced: the participant, or every field error; a failed row still carries the keys
 * (identity, external id) of the fields that coerced well, which name its participant.
 */
export type RowOutcome = { ok: true; participant: CoercedParticipant } | { ok: false; errors: FieldError[]; keys?: RowKeys };

/** The keys of a row that name its participant: phone, e-mail (identity) and external id. */
export type RowKeys = { identity: Pick<CoercedParticipant['identity'], 'phone' | 'email'>; externalId?: string };

/** A value that could not be coerced, with the message saying why. */
export class Bad {
  constructor(readonly message: string) {}
}
/** Raw trimmed text → typed value, undefined (empty), or Bad. */
export type Converter = (raw: string) => unknown;

// One way to split each run of digits: `\d+\.?\d*` could split `111…1x` n ways before failing (quadratic).
const PLAIN_NUMBER = /^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?$/;
const GROUPED_NUMBER = /^[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?$/;
const INDIAN_GROUPED_NUMBER = /^[+-]?\d{1,2}(?:,\d{2})*,\d{3}(?:\.\d+)?$/;
const DECIMAL_COMMA_NUMBER = /^[+-]?\d+,\d+$/;
const BOOLEANS = new Map<string, boolean>([
  ['true', true], ['yes', true], ['y', true], ['1', true],
  ['false', false], ['no', false], ['n', false], ['0', false],
]);
const MAX_SHOWN = 60;
/** Longest raw number, boolean or phone number, in characters (docs/decisions.md, "Linear-time input"). */
export const MAX_TOKEN_CHARS = 40;

/**
 * Compiles the coercion of rows mapped by `mapping` (from `matchHeaders` for `domain`). Compile
 * once per job; the returned function is called per row, never throws for bad data, and reports
 * every field error of the row (coercion and schema errors together, one per field and rule).
 * @throws Error when `mapping` names a field `domain` does not have (a programming error).
 */
export function createRowCoercer(network: Network, domain: Domain, mapping: ColumnMapping): (values: string[]) => RowOutcome {
  const fields = new Map(domain.fields.map((f) => [f.name, f]));
  const columns = mapping.columns.map(({ index, field: name }) => {
    const field = fields.get(name);
    if (!field) throw new Error(`column mapping names "${name}", which is not a field of ${domain.name}`);
    return { index, name, convert: fieldConverter(network, field) };
  });
  const derived = (mapping.derived ?? []).map((d) => {
    const field = fields.get(d.field);
    if (!field) throw new Error(`mapping names "${d.field}", which is not a field of ${domain.name}`);
    return { name: d.field, read: derivedReader(network, field, d) };
  });
  const unnamed = mapping.unnamed ?? [];
  const width = mapping.width ?? Infinity;
  const latitude = domain.fields.find((f) => f.location === 'latitude')?.name;
  const longitude = domain.fields.find((f) => f.location === 'longitude')?.name;

  return (values) => {
    const profile: Record<string, unknown> = {};
    let errors: FieldError[] | null = null;
    for (let c = 0; c < columns.length; c++) {
      const column = columns[c];
      const raw = values[column.index];
      if (raw === undefined || raw === '') continue;
      const value = column.convert(raw);
      if (value instanceof Bad) (errors ??= []).push({ field: column.name, message: value.message });
      else if (value !== undefined) profile[column.name] = value;
    }
    for (let d = 0; d < derived.length; d++) {
      const value = derived[d].read(values);
      if (value instanceof Bad) (errors ??= []).push({ field: derived[d].name, message: value.message });
      else if (value !== undefined) profile[derived[d].name] = value;
    }
    for (let i = 0; i < unnamed.length; i++) {
      if (values[unnamed[i]]) (errors ??= []).push(strayCell(unnamed[i], values[unnamed[i]]));
    }
    for (let i = width; i < values.length; i++) {
      if (values[i]) (errors ??= []).push(strayCell(i, values[i]));
    }
    if (latitude && longitude && (profile[latitude] === undefined) !== (profile[longitude] === undefined)) {
      const [given, missing] = profile[latitude] === undefined ? [longitude, latitude] : [latitude, longitude];
      if (!errors?.some((e) => e.field === missing)) (errors ??= []).push({ field: missing, message: `${missing} is required when ${given} is given` });
    }
    if (!domain.validate(profile)) errors = schemaErrors(domain, fields, profile, domain.validate.errors ?? [], errors ?? []);
    if (errors) {
      // The keys that coerced well still name the row's participant (a sync upload keeps it: issue 30).
      for (const e of errors) delete profile[e.field];
      const { identity: { phone, email }, externalId } = participantOf(domain, profile);
      if (phone === undefined && email === undefined && externalId === undefined) return { ok: false, errors };
      return { ok: false, errors, keys: { identity: { phone, email }, externalId } };
    }
    return { ok: true, participant: participantOf(domain, profile) };
  };
}

/**
 * The schema errors of a whole `profile` of `domain` (its compiled Ajv validator, allErrors), one
 * FieldError per field and rule as for a row; null when it is valid. An upsert validates the
 * stored profile merged with a row's fields with it (issue 30).
 */
export function profileErrors(domain: Domain, profile: Record<string, unknown>): FieldError[] | null {
  if (domain.validate(profile)) return null;
  return schemaErrors(domain, new Map(domain.fields.map((f) => [f.name, f])), profile, domain.validate.errors ?? [], []);
}

/**
 * The participant a valid `profile` of `domain` makes: identity (name, phone, e-mail), external
 * id and location read from the fields annotated so (`x-identity`, `x-external-id`,
 * `x-location`). The profile is kept, not copied.
 */
export function participantOf(domain: Domain, profile: Record<string, unknown>): CoercedParticipant {
  const participant: CoercedParticipant = { profile, identity: {}, locations: [] };
  let latitude: number | undefined;
  let longitude: number | undefined;
  for (const field of domain.fields) {
    const value = profile[field.name];
    if (value === undefined) continue;
    if (field.identity) participant.identity[field.identity] = value as string;
    if (field.externalId) participant.externalId = String(value);
    if (field.location === 'latitude') latitude = value as number;
    if (field.location === 'longitude') longitude = value as number;
  }
  if (latitude !== undefined && longitude !== undefined) participant.locations.push({ lat: latitude, lng: longitude });
  return participant;
}

/**
 * The converter of one field (the rules in the module comment): raw trimmed text → typed value,
 * undefined (nothing), or Bad. Options: `item` gives an array field's item converter; `delimiter`
 * splits an array field on another string than the network's; `mapItem` translates each value
 * (each item of an array) first — null drops it, Bad fails it.
 */
export function fieldConverter(network: Network, field: FieldInfo,
  options: { item?: boolean; delimiter?: string; mapItem?: (raw: string) => string | null | Bad } = {}): Converter {
  const { mapItem } = options;
  let scalar: Converter;
  if (field.identity === 'phone') scalar = phoneConverter(field, network.defaultPhoneRegion as CountryCode);
  else if (field.identity === 'email') scalar = (raw) => raw.toLowerCase();
  else scalar = scalarConverter(field.name, field.kind === 'array' ? field.itemKind ?? 'string' : field.kind, field.enum);
  scalar = capped(field, scalar);
  if (field.kind !== 'array' || options.item) {
    if (!mapItem) return scalar;
    return (raw) => {
      const mapped = mapItem(raw);
      return mapped === null ? undefined : mapped instanceof Bad ? mapped : scalar(mapped);
    };
  }
  const delimiter = options.delimiter ?? network.csvArrayDelimiter;
  return (raw) => {
    const items: unknown[] = [];
    const bad: string[] = [];
    for (const part of raw.split(delimiter)) {
      let text: string | null | Bad = part.trim();
      if (text === '') continue;
      if (mapItem) {
        text = mapItem(text);
        if (text === null) continue;
        if (text instanceof Bad) {
          bad.push(text.message);
          continue;
        }
      }
      const value = scalar(text);
      if (value instanceof Bad) bad.push(value.message);
      else items.push(value);
    }
    if (bad.length > 0) return new Bad(bad.join('; '));
    return items.length > 0 ? items : undefined;
  };
}

/**
 * The longest raw value (an array's: each item) `field` accepts, in characters as JSON Schema counts
 * them: the schema's `maxLength` for text (names, e-mails, plain strings); MAX_TOKEN_CHARS for
 * numbers, booleans and phone numbers (written with spaces and dashes, so not the E.164 maxLength);
 * twice the longest allowed value, at least MAX_TOKEN_CHARS, for a closed set (matched loosely, with
 * spaces and punctuation). Undefined for text without a `maxLength`: its handling is linear, and the
 * cell limit (BULK_MAX_CELL_CHARS) or the body limit (HTTP_BODY_LIMIT) bounds it.
 */
export function rawValueCap(field: FieldInfo): number | undefined {
  if (field.identity === 'phone') return Math.max(MAX_TOKEN_CHARS, field.maxLength ?? 0);
  if (field.enum) return Math.max(MAX_TOKEN_CHARS, ...field.enum.map((v) => 2 * String(v).length));
  const kind = field.kind === 'array' ? field.itemKind ?? 'string' : field.kind;
  return kind === 'string' ? field.maxLength : MAX_TOKEN_CHARS;
}

/** `convert` behind the field's cap: a longer value is Bad (the schema's maxLength message), never converted. */
function capped(field: FieldInfo, convert: Converter): Converter {
  const cap = rawValueCap(field);
  if (cap === undefined) return convert;
  const subject = field.kind === 'array' ? `each value of ${field.name}` : field.name;
  return (raw) => longerThan(raw, cap) ? new Bad(`${subject} must be at most ${cap} characters long (got ${shown(raw)})`) : convert(raw);
}

/** Whether `text` has more than `max` code points (JSON Schema's count), in time bounded by `max`. */
function longerThan(text: string, max: number): boolean {
  if (text.length <= max) return false;
  if (text.length > 2 * max) return true; // a code point is one or two UTF-16 units
  let count = 0;
  for (const _ of text) if (++count > max) return true;
  return false;
}

/** Reads a field given by a field spec (lib/aggregator/bulk/mapping.ts) from a row's values. */
function derivedReader(network: Network, field: FieldInfo, derived: DerivedField): (values: string[]) => unknown {
  const { spec, indexes } = derived;
  if (spec.value !== undefined) {
    const constant = constantValue(network, field, spec.value);
    if (constant instanceof Bad) throw new Error(`the constant of ${field.name} is not valid: ${constant.message}`);
    return () => constant;
  }
  let mapItem: ((raw: string) => string | null | Bad) | undefined;
  if (spec.map) {
    const map = new Map(Object.entries(spec.map).map(([from, to]) => [mapKey(from), to]));
    const fallback = spec.default;
    const source = derived.headers.length === 1 ? `column ${derived.headers[0]}` : `columns ${derived.headers.join(', ')}`;
    const mapped = list(Object.keys(spec.map).map((k) => JSON.stringify(k)));
    mapItem = (raw) => {
      const to = map.get(mapKey(raw));
      if (to !== undefined) return to;
      if (fallback !== undefined) return fallback;
      return new Bad(`${field.name} has no mapping for the value ${shown(raw)} of ${source}; mapped values are ${mapped}`);
    };
  }
  const convert = fieldConverter(network, field, { delimiter: spec.split, mapItem });
  if (indexes.length === 1) {
    const index = indexes[0];
    return (values) => {
      const raw = values[index];
      return raw === undefined || raw === '' ? undefined : convert(raw);
    };
  }
  const join = spec.join ?? DEFAULT_JOIN;
  return (values) => {
    const parts: string[] = [];
    for (const index of indexes) if (values[index]) parts.push(values[index]);
    return parts.length === 0 ? undefined : convert(parts.join(join));
  };
}

/** A spec's constant, typed for `field`: strings (and array items) go through the field's converter. */
export function constantValue(network: Network, field: FieldInfo, value: unknown): unknown {
  if (field.kind === 'array' && Array.isArray(value)) {
    const item = fieldConverter(network, field, { item: true });
    const items = value.map((v) => item(String(v)));
    const bad = items.find((v): v is Bad => v instanceof Bad);
    return bad ?? items;
  }
  return fieldConverter(network, field)(String(value).trim());
}

function list(items: string[]): string {
  return items.length > 20 ? `${items.slice(0, 20).join(', ')}, … (${items.length} in all)` : items.join(', ');
}

function scalarConverter(name: string, kind: Exclude<FieldKind, 'array'>, allowed: (string | number)[] | undefined): Converter {
  if (allowed) return enumConverter(name, kind, allowed);
  switch (kind) {
    case 'string':
      return (raw) => raw;
    case 'number':
      return (raw) => {
        const n = parseNumber(raw);
        return n === null ? new Bad(`${name} must be a number (got ${shown(raw)})`) : n;
      };
    case 'integer':
      return (raw) => {
        const n = parseNumber(raw);
        return n === null || !Number.isInteger(n) ? new Bad(`${name} must be a whole number (got ${shown(raw)})`) : n;
      };
    case 'boolean':
      return (raw) => BOOLEANS.get(raw.toLowerCase()) ?? new Bad(`${name} must be yes or no (or true/false, 1/0; got ${shown(raw)})`);
  }
}

/** Matches a closed set exactly, then without case, spaces or punctuation; stores the canonical value. */
function enumConverter(name: string, kind: Exclude<FieldKind, 'array'>, allowed: (string | number)[]): Converter {
  const exact = new Map<string, string | number>();
  const loose = new Map<string, string | number | null>();
  for (const value of allowed) {
    exact.set(String(value), value);
    exact.set(String(value).toLowerCase(), value);
    const key = normalizeHeader(String(value));
    loose.set(key, loose.has(key) && loose.get(key) !== value ? null : value);
  }
  const message = `must be one of ${allowed.join(', ')}`;
  return (raw) => {
    const value = exact.get(raw) ?? exact.get(raw.toLowerCase()) ?? loose.get(normalizeHeader(raw))
      ?? (kind === 'string' ? undefined : exact.get(String(parseNumber(raw))));
    return value ?? new Bad(`${name} ${message} (got ${shown(raw)})`);
  };
}

function phoneConverter(field: FieldInfo, region: CountryCode): Converter {
  const example = typeof field.examples[0] === 'string' ? `, e.g. ${field.examples[0]}` : '';
  return (raw) => {
    const phone = parsePhoneNumberFromString(raw, region);
    return phone?.isValid() ? phone.number : new Bad(`${field.name} must be a valid phone number${example} (got ${shown(raw)})`);
  };
}

/** A number in one of the accepted notations (see the module comment), or null. */
export function parseNumber(raw: string): number | null {
  let text = raw;
  if (!PLAIN_NUMBER.test(text)) {
    if (GROUPED_NUMBER.test(text) || INDIAN_GROUPED_NUMBER.test(text)) text = text.replaceAll(',', '');
    else if (DECIMAL_COMMA_NUMBER.test(text)) text = text.replace(',', '.');
    else return null;
  }
  const n = Number(text);
  return Number.isFinite(n) ? n : null;
}

function strayCell(index: number, value: string): FieldError {
  const column = `column ${columnLetter(index)}`;
  return { field: column, message: `${column} has no header, so its value ${shown(value)} would be lost; add a header or clear the cell` };
}

/** Ajv errors as one human message per field and rule, leaving out fields that already failed coercion. */
function schemaErrors(domain: Domain, fields: Map<string, FieldInfo>, profile: Record<string, unknown>, ajvErrors: ErrorObject[], errors: FieldError[]): FieldError[] {
  const failed = new Set(errors.map((e) => e.field));
  const seen = new Set<string>();
  for (const err of ajvErrors) {
    const path = err.instancePath.split('/').slice(1).map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
    const name = err.keyword === 'required' ? (err.params as { missingProperty: string }).missingProperty : path[0] ?? '(row)';
    const key = `${name}\u0000${err.keyword}`;
    if (failed.has(name) || seen.has(key)) continue;
    seen.add(key);
    const isItem = path.length > 1;
    const value = isItem ? (profile[name] as unknown[])[Number(path[1])]
      : err.keyword === 'uniqueItems' ? (profile[name] as unknown[])[(err.params as { j: number }).j] : profile[name];
    errors.push({ field: name, message: schemaMessage(domain, fields.get(name), name, err, value, isItem) });
  }
  return errors;
}

function schemaMessage(domain: Domain, field: FieldInfo | undefined, name: string, err: ErrorObject, value: unknown, isItem: boolean): string {
  const params = err.params as Record<string, any>;
  const got = value === undefined || Array.isArray(value) ? '' : ` (got ${shown(String(value))})`;
  const subject = isItem ? `each value of ${name}` : name;
  switch (err.keyword) {
    case 'required':
      return `${name} is required`;
    case 'enum':
      return `${subject} must be one of ${params.allowedValues.join(', ')}${got}`;
    case 'minimum':
    case 'maximum':
    case 'exclusiveMinimum':
    case 'exclusiveMaximum':
      if (field?.minimum !== undefined && field.maximum !== undefined) return `${name} must be between ${field.minimum} and ${field.maximum}${got}`;
      return `${name} must be ${err.keyword.endsWith('inimum') ? 'at least' : 'at most'} ${params.limit}${got}`;
    case 'minLength':
      return `${subject} must have at least ${params.limit} characters${got}`;
    case 'maxLength':
      return `${subject} must be at most ${params.limit} characters long${got}`;
    case 'format':
      return `${name} must be a valid ${params.format === 'email' ? 'e-mail address' : params.format}${got}`;
    case 'minItems':
      return `${name} must have at least ${params.limit} value${params.limit === 1 ? '' : 's'}`;
    case 'maxItems':
      return `${name} must have at most ${params.limit} values`;
    case 'uniqueItems':
      return `${name} must not repeat a value${got.replace('got', 'repeated:')}`;
    case 'additionalProperties':
      return `${params.additionalProperty} is not a field of ${domain.name} participants`;
    default:
      return `${subject} ${err.message ?? 'is invalid'}${got}`;
  }
}

/** A value quoted for a message, shortened when long. */
function shown(value: string): string {
  return JSON.stringify(value.length > MAX_SHOWN ? `${value.slice(0, MAX_SHOWN)}…` : value);
}
