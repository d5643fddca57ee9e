/**
 * Checking a bulk-upload mapping (lib/aggregator/bulk/mapping.ts) against the participant schema,
 * when an upload or a saved mapping is created (issue 17: 400, shape C, naming the field).
 */
import type { Domain, FieldInfo, Network } from '../../network/config.ts';
import { mapKey, MappingError, type FieldSpec, type Mapping } from './mapping.ts';
import { Bad, fieldConverter } from './row-coercion.ts';

const MAX_ENTRIES = 500;
const MAX_MAP_ENTRIES = 1000;
const MAX_JOINED_COLUMNS = 20;
const SPEC_KEYS = new Set(['column', 'columns', 'join', 'value', 'map', 'default', 'split']);

/**
 * Checks `json` as a mapping for `domain` and returns it. Header entries must name a schema field
 * (or null); field specs must have one source (column, columns or value) and only the options
 * that go with it; constants, mapped values and defaults must be valid values of the field (the
 * row coercion's rules); `split` only for array fields.
 * @throws MappingError naming the entry and the problem (the API answers 400, shape C)
 */
export function parseMapping(network: Network, domain: Domain, json: unknown): Mapping {
  if (json === null || typeof json !== 'object' || Array.isArray(json)) {
    throw new MappingError(null, 'must be a JSON object: file header → schema field name (or null), or schema field name → field spec');
  }
  const entries = Object.entries(json as Record<string, unknown>);
  if (entries.length > MAX_ENTRIES) throw new MappingError(null, `at most ${MAX_ENTRIES} entries`);
  const fields = new Map(domain.fields.map((f) => [f.name, f]));
  const fieldList = [...fields.keys()].join(', ');
  const mapping: Mapping = {};
  const specified = new Set<string>();
  for (const [key, value] of entries) {
    if (key.trim() === '' || key.length > 200) throw new MappingError(null, `keys must be 1 to 200 characters (got ${JSON.stringify(key.slice(0, 40))})`);
    if (value === null || typeof value === 'string') {
      if (value !== null && !fields.has(value)) {
        throw new MappingError(null, `unknown ${domain.name} fields ${JSON.stringify(value)} (for ${JSON.stringify(key)}); fields are ${fieldList}`);
      }
      mapping[key] = value;
      continue;
    }
    if (typeof value !== 'object' || Array.isArray(value)) {
      throw new MappingError(null, `${JSON.stringify(key)} must map to a schema field name, null (ignore the column) or a field spec object`);
    }
    const field = fields.get(key);
    if (!field) throw new MappingError(null, `${JSON.stringify(key)} is not a ${domain.name} field (a field spec is keyed by the schema field); fields are ${fieldList}`);
    mapping[key] = parseSpec(network, field, value as Record<string, unknown>);
    specified.add(key);
  }
  for (const [key, value] of Object.entries(mapping)) {
    if (typeof value === 'string' && specified.has(value)) {
      throw new MappingError(value, `${value} has a field spec and is also the target of the column ${JSON.stringify(key)}; keep one`);
    }
  }
  return mapping;
}

function parseSpec(network: Network, field: FieldInfo, spec: Record<string, unknown>): FieldSpec {
  const fail = (problem: string): never => { throw new MappingError(field.name, `${field.name}: ${problem}`); };
  for (const key of Object.keys(spec)) {
    if (!SPEC_KEYS.has(key)) fail(`unknown option ${JSON.stringify(key)}; a field spec takes column, columns (+ join), value, map (+ default) or split`);
  }
  const sources = ['column', 'columns', 'value'].filter((k) => k in spec);
  if (sources.length !== 1) fail(`give exactly one of column, columns or value${sources.length ? ` (got ${sources.join(' and ')})` : ''}`);
  const convert = fieldConverter(network, field);
  const itemConvert = field.kind === 'array' ? fieldConverter(network, field, { item: true }) : convert;
  const checkValue = (raw: string, what: string) => {
    const converted = itemConvert(raw);
    if (converted instanceof Bad) fail(`${what} ${JSON.stringify(raw)} is not a valid value: ${converted.message}`);
  };
  const out: FieldSpec = {};

  if ('value' in spec) {
    for (const k of ['join', 'map', 'default', 'split']) if (k in spec) fail(`${k} does not go with value (a constant)`);
    const value = spec.value;
    const items = Array.isArray(value) && field.kind === 'array' ? value : [value];
    for (const item of items) {
      if (item === null || !['string', 'number', 'boolean'].includes(typeof item)) {
        fail(`value must be a string, number or boolean${field.kind === 'array' ? ', or an array of them' : ''}`);
      }
      const text = String(item);
      if (text.trim() === '') fail('value must not be empty (leave the field out to leave it empty)');
      if (field.kind === 'array' && !Array.isArray(value)) {
        // A delimited list, split as a cell would be.
        const converted = convert(text.trim());
        if (converted instanceof Bad) fail(`value ${JSON.stringify(text)} is not a valid value: ${converted.message}`);
      } else {
        checkValue(text, 'value');
      }
    }
    out.value = value;
    return out;
  }

  if ('column' in spec) {
    if (typeof spec.column !== 'string' || spec.column.trim() === '') fail('column must be the header of a column of the file');
    out.column = spec.column as string;
    if ('join' in spec) fail('join goes with columns, not column');
  } else {
    const columns = spec.columns;
    if (!Array.isArray(columns) || columns.length === 0 || columns.length > MAX_JOINED_COLUMNS
      || columns.some((c) => typeof c !== 'string' || c.trim() === '')) {
      fail(`columns must be a list of 1 to ${MAX_JOINED_COLUMNS} column headers`);
    }
    out.columns = columns as string[];
    if ('join' in spec) {
      if (typeof spec.join !== 'string') fail('join must be a string, e.g. ", "');
      out.join = spec.join as string;
    }
  }

  if ('split' in spec) {
    if (field.kind !== 'array') fail(`split is for list fields; ${field.name} holds a single ${field.kind}`);
    if (typeof spec.split !== 'string' || spec.split === '') fail('split must be a non-empty string, e.g. ";"');
    out.split = spec.split as string;
  }

  if ('map' in spec) {
    const map = spec.map;
    if (map === null || typeof map !== 'object' || Array.isArray(map)) fail('map must be an object: file value → field value, or null for empty');
    const entries = Object.entries(map as Record<string, unknown>);
    if (entries.length === 0 || entries.length > MAX_MAP_ENTRIES) fail(`map must have 1 to ${MAX_MAP_ENTRIES} entries`);
    const seen = new Map<string, unknown>();
    for (const [from, to] of entries) {
      if (to !== null && typeof to !== 'string' && typeof to !== 'number' && typeof to !== 'boolean') {
        fail(`map value for ${JSON.stringify(from)} must be a string, number, boolean or null`);
      }
      const key = mapKey(from);
      if (seen.has(key) && seen.get(key) !== to) fail(`map has ${JSON.stringify(from)} twice (compared trimmed and without case) with different values`);
      seen.set(key, to);
      if (to !== null) checkValue(String(to), `map value for ${JSON.stringify(from)}:`);
    }
    out.map = Object.fromEntries(entries.map(([from, to]) => [from, to === null ? null : String(to)]));
    if ('default' in spec) {
      const fallback = spec.default;
      if (fallback !== null && typeof fallback !== 'string' && typeof fallback !== 'number' && typeof fallback !== 'boolean') {
        fail('default must be a string, number, boolean or null');
      }
      if (fallback !== null) checkValue(String(fallback), 'default');
      out.default = fallback === null ? null : String(fallback);
    }
  } else if ('default' in spec) {
    fail('default goes with map (the value for file values the map does not list)');
  }
  return out;
}
