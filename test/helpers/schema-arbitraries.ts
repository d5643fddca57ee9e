/**
 * fast-check arbitraries built from the JSON Schemas of a service's OpenAPI document — which
 * zod-openapi renders from the very zod schemas the handlers validate with (api/http/openapi.ts) —
 * and mutations of the values they produce (test/platform/fuzz-schemas.test.ts).
 *
 * zod-fast-check would build them from the zod schemas directly but supports zod 3 only (we are on
 * zod 4); the JSON Schema subset zod-openapi emits is small (type, properties, required, items,
 * enum, const, anyOf, pattern, format, min/max bounds, $ref to components), so it is read here.
 */
import fc from 'fast-check';

type Schema = Record<string, any>;

/** Resolves `#/components/schemas/X` references against `doc`. */
function resolve(schema: Schema, doc: Schema): Schema {
  let s = schema;
  for (let i = 0; i < 10 && typeof s?.$ref === 'string'; i++) {
    s = s.$ref.replace(/^#\//, '').split('/').reduce((node: any, key: string) => node?.[key], doc) ?? {};
  }
  return s ?? {};
}

const anyJson = fc.jsonValue({ maxDepth: 2 });

/**
 * A fast-check arbitrary of values valid against `schema` (a JSON Schema of `doc`), as far as
 * the keywords above go: refinements a JSON Schema cannot say (cross-field rules) are not
 * known, so a "valid" value may still be refused — the fuzz properties never assume it is not.
 * Strings and arrays are kept short (a few dozen characters, a few items).
 */
export function arbitraryOf(schema: Schema, doc: Schema, depth = 0): fc.Arbitrary<unknown> {
  const s = resolve(schema, doc);
  if (depth > 8) return fc.constant(null);
  if ('const' in s) return fc.constant(s.const);
  if (Array.isArray(s.enum)) return fc.constantFrom(...s.enum);
  for (const key of ['anyOf', 'oneOf'] as const) {
    if (Array.isArray(s[key]) && s[key].length) return fc.oneof(...s[key].map((x: Schema) => arbitraryOf(x, doc, depth + 1)));
  }
  if (Array.isArray(s.allOf) && s.allOf.length) return arbitraryOf({ ...s, allOf: undefined, ...resolve(s.allOf[0], doc) }, doc, depth + 1);
  if (Array.isArray(s.type)) return fc.oneof(...s.type.map((type: string) => arbitraryOf({ ...s, type }, doc, depth)));
  switch (s.type) {
    case 'null': return fc.constant(null);
    case 'boolean': return fc.boolean();
    case 'integer': {
      const min = Math.ceil(s.exclusiveMinimum !== undefined ? s.exclusiveMinimum + 1 : s.minimum ?? -1_000_000);
      const max = Math.floor(s.exclusiveMaximum !== undefined ? s.exclusiveMaximum - 1 : s.maximum ?? 1_000_000);
      return fc.integer({ min: Math.max(min, Number.MIN_SAFE_INTEGER), max: Math.min(max, Number.MAX_SAFE_INTEGER) });
    }
    case 'number': {
      const min = s.minimum ?? s.exclusiveMinimum ?? -1e6;
      const max = s.maximum ?? s.exclusiveMaximum ?? 1e6;
      return fc.double({ min, max, noNaN: true, noDefaultInfinity: true, minExcluded: s.exclusiveMinimum !== undefined, maxExcluded: s.exclusiveMaximum !== undefined });
    }
    case 'string': return stringOf(s);
    case 'array': {
      if (Array.isArray(s.prefixItems)) return fc.tuple(...s.prefixItems.map((x: Schema) => arbitraryOf(x, doc, depth + 1)));
      const minLength = s.minItems ?? 0;
      return fc.array(s.items ? arbitraryOf(s.items, doc, depth + 1) : anyJson, { minLength, maxLength: Math.min(s.maxItems ?? minLength + 3, minLength + 3) });
    }
    case 'object': {
      const properties: Record<string, Schema> = s.properties ?? {};
      const record = fc.record(
        Object.fromEntries(Object.entries(properties).map(([k, v]) => [k, arbitraryOf(v, doc, depth + 1)])),
        { requiredKeys: (s.required ?? []).filter((k: string) => k in properties) },
      );
      if (!s.additionalProperties || typeof s.additionalProperties !== 'object') return record;
      const keys = s.propertyNames ? stringOf(resolve(s.propertyNames, doc)) : fc.string({ minLength: 1, maxLength: 12 });
      const extra = fc.dictionary(keys.filter((k) => !(k in properties)), arbitraryOf(s.additionalProperties, doc, depth + 1), { maxKeys: 3 });
      return fc.tuple(record, extra).map(([a, b]) => ({ ...b, ...a }));
    }
    default: return anyJson;
  }
}

function stringOf(s: Schema): fc.Arbitrary<string> {
  const minLength = s.minLength ?? 0;
  const maxLength = s.maxLength ?? Math.max(minLength, 30);
  // Formats and patterns make their own lengths: filtered only against declared bounds.
  const fits = (v: string) => v.length >= minLength && v.length <= (s.maxLength ?? Infinity);
  switch (s.format) {
    case 'uuid': return fc.uuid({ version: 4 });
    case 'date-time': return fc.date({ min: new Date('2000-01-01'), max: new Date('2099-12-31'), noInvalidDate: true }).map((d) => d.toISOString());
    case 'email': return fc.constantFrom('asha@example.org', 'r.kumar+ldp@mail.example.in', 'x@y.co');
    case 'uri': return fc.webUrl({ size: 'small' }).filter(fits);
    case 'binary': return fc.constant('name,phone\r\nAsha,9876543210\r\n');
  }
  if (typeof s.pattern === 'string') return fc.stringMatching(new RegExp(s.pattern)).filter(fits);
  return fc.string({ minLength, maxLength: Math.min(maxLength, minLength + 30) });
}

/** Where in a JSON value: keys and indexes from the root. */
export type JsonPath = (string | number)[];

/**
 * The paths of `value`'s keys that `schema` requires, at every depth (through properties, items,
 * additionalProperties and every anyOf/oneOf branch): what the `drop` mutation removes.
 */
export function requiredPathsOf(schema: Schema, doc: Schema, value: unknown, path: JsonPath = [], depth = 0): JsonPath[] {
  const s = resolve(schema, doc);
  if (depth > 12 || value === null || typeof value !== 'object') return [];
  const branches = [...(s.anyOf ?? []), ...(s.oneOf ?? []), ...(s.allOf ?? [])];
  const out = branches.flatMap((b: Schema) => requiredPathsOf(b, doc, value, path, depth + 1));
  if (Array.isArray(value)) {
    value.forEach((v, i) => {
      const item = Array.isArray(s.prefixItems) ? s.prefixItems[i] : s.items;
      if (item) out.push(...requiredPathsOf(item, doc, v, [...path, i], depth + 1));
    });
    return out;
  }
  const record = value as Record<string, unknown>;
  for (const key of s.required ?? []) if (Object.hasOwn(record, key)) out.push([...path, key]);
  for (const [key, v] of Object.entries(record)) {
    const child = s.properties?.[key] ?? (typeof s.additionalProperties === 'object' ? s.additionalProperties : undefined);
    if (child) out.push(...requiredPathsOf(child, doc, v, [...path, key], depth + 1));
  }
  return out;
}

/** Every node of `value` with its path, root first. */
export function nodesOf(value: unknown, path: JsonPath = []): { path: JsonPath; value: unknown }[] {
  const out = [{ path, value }];
  if (Array.isArray(value)) value.forEach((v, i) => out.push(...nodesOf(v, [...path, i])));
  else if (value && typeof value === 'object') for (const [k, v] of Object.entries(value)) out.push(...nodesOf(v, [...path, k]));
  return out;
}

/** `value` with the node at `path` replaced by `replacement` (or removed when `remove`). */
function replaceAt(value: unknown, path: JsonPath, replacement: unknown, remove = false): unknown {
  if (path.length === 0) return replacement;
  const [head, ...rest] = path;
  if (Array.isArray(value)) {
    const copy = [...value];
    if (remove && rest.length === 0) copy.splice(head as number, 1);
    else copy[head as number] = replaceAt(copy[head as number], rest, replacement, remove);
    return copy;
  }
  const copy: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
    if (k !== head) define(copy, k, v);
    else if (!(remove && rest.length === 0)) define(copy, k, replaceAt(v, rest, replacement, remove));
  }
  return copy;
}

/** Sets an own property, even `__proto__` (JSON.stringify then writes it as a key). */
function define(target: Record<string, unknown>, key: string, value: unknown) {
  Object.defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
}

/** A number written into the JSON text as is (`1e309` parses as Infinity). */
export class RawNumber {
  constructor(readonly text: string) {}
  toJSON() {
    return `@@raw:${this.text}@@`;
  }
}

/** JSON text of `value`, with RawNumbers written raw. */
export function jsonText(value: unknown): string {
  return (JSON.stringify(value) ?? 'null').replace(/"@@raw:([^"@]*)@@"/g, '$1');
}

const CONFUSABLE: Record<string, string> = { a: 'а', c: 'с', e: 'е', i: 'і', o: 'о', p: 'р', s: 'ѕ', x: 'х', y: 'у', A: 'Α', B: 'Β', E: 'Ε' };
/** Ways to make a string look the same and differ (homoglyphs, fullwidth, invisible, RTL, NFD). */
const CONFUSE: ((s: string) => string)[] = [
  (s) => s.replace(/[aceiopsxyABE]/g, (c) => CONFUSABLE[c]) || 'ѕ',
  (s) => s.replace(/[!-~]/g, (c) => String.fromCharCode(c.charCodeAt(0) + 0xfee0)) || '０',
  (s) => `${s.slice(0, 1)}\u200b${s.slice(1)}`,
  (s) => `\u202e${s}`,
  (s) => `${s}\u0301`,
  (s) => s.normalize('NFD') === s ? `${s}e\u0301` : s.normalize('NFD'),
  (s) => `${s}\u0000`,
  (s) => ` ${s}\t`,
];

export const PROTOTYPE_KEYS = ['__proto__', 'constructor', 'prototype', 'toString', 'valueOf', 'hasOwnProperty', 'toString.1', '__proto__.polluted'];
const WRONG_TYPES: unknown[] = [null, true, false, 0, -1, 1.5, '', 'x', '1', 'true', [], [null], {}, { a: {} }, [[[]]]];
const EXTREME_NUMBERS = ['1e309', '-1e309', '1e308', '-1e308', '9007199254740993', '-0', '1e-400', '0.30000000000000004', '123456789012345678901234567890', '2147483648', '-2147483649'];
const ONE_MB = 'x'.repeat(1_048_576);

export const MUTATIONS = ['none', 'drop', 'wrong-type', 'prototype-key', 'huge-string', 'extreme-number', 'confusable', 'wrap-in-array'] as const;
export type MutationKind = typeof MUTATIONS[number];
export interface Mutation {
  kind: MutationKind;
  /** Which node (modulo the number of candidates). */
  at: number;
  /** Which variant of the mutation (modulo the number of variants). */
  variant: number;
}

/** A mutation descriptor: shrinks towards `none` at the root. */
export const mutationArbitrary: fc.Arbitrary<Mutation> = fc.record({
  kind: fc.constantFrom(...MUTATIONS),
  at: fc.nat({ max: 1_000 }),
  variant: fc.nat({ max: 1_000 }),
});

/**
 * `value` with one `mutation` applied at one of its nodes: a key dropped (one of `required`, the
 * paths of required keys, when given), a value of another type, a prototype key added, a 1 MB string, a huge or
 * non-finite number (as raw JSON text), a look-alike of a string, a value wrapped in an array.
 * `hugeLength` caps the long string (query strings and headers cannot carry 1 MB); `keepRoot`
 * mutates inside an object of named parameters only, never the object itself.
 */
export function mutate(value: unknown, mutation: Mutation, { hugeLength = ONE_MB.length, keepRoot = false, required = [] as JsonPath[] } = {}): unknown {
  // keepRoot: the value is a set of named parameters (path, query, headers) and stays one.
  const nodes = nodesOf(value).filter((n) => !keepRoot || n.path.length > 0);
  if (!nodes.length && mutation.kind !== 'prototype-key') return value;
  const pick = <T>(list: T[], n = mutation.at): T => list[n % list.length];
  switch (mutation.kind) {
    case 'none': return value;
    case 'drop': {
      // A required key when there is one (the interesting case), else any key or item.
      if (required.length) return replaceAt(value, pick(required), undefined, true);
      const keyed = nodes.filter((n) => n.path.length > 0);
      if (!keyed.length) return undefined;
      return replaceAt(value, pick(keyed).path, undefined, true);
    }
    case 'wrong-type': {
      const node = pick(nodes);
      const wrong = WRONG_TYPES.filter((w) => typeof w !== typeof node.value || Array.isArray(w) !== Array.isArray(node.value));
      return replaceAt(value, node.path, pick(wrong, mutation.variant));
    }
    case 'prototype-key': {
      const objects = nodesOf(value).filter((n) => n.value !== null && typeof n.value === 'object' && !Array.isArray(n.value));
      const target = objects.length ? pick(objects) : { path: [], value: {} };
      const copy = { ...(target.value as object) } as Record<string, unknown>;
      define(copy, pick(PROTOTYPE_KEYS, mutation.variant), pick([{ polluted: true }, 'x', 1, null, [1]], mutation.variant >> 3));
      return replaceAt(value, target.path, copy);
    }
    case 'huge-string': {
      const strings = nodes.filter((n) => typeof n.value === 'string');
      return replaceAt(value, (strings.length ? pick(strings) : pick(nodes)).path, ONE_MB.slice(0, hugeLength));
    }
    case 'extreme-number': {
      const numbers = nodes.filter((n) => typeof n.value === 'number');
      return replaceAt(value, (numbers.length ? pick(numbers) : pick(nodes)).path, new RawNumber(pick(EXTREME_NUMBERS, mutation.variant)));
    }
    case 'confusable': {
      const strings = nodes.filter((n) => typeof n.value === 'string');
      if (!strings.length) return value;
      const node = pick(strings);
      return replaceAt(value, node.path, pick(CONFUSE, mutation.variant)(node.value as string));
    }
    case 'wrap-in-array': {
      const node = pick(nodes);
      return replaceAt(value, node.path, [node.value, node.value]);
    }
  }
}
