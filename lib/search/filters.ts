/**
 * Structured filters of `/v1/search` (`intent.filters`, ANDed): `target` is `item_state.<field>`
 * for a field of the searched domain's participant schema; `op` is one of FILTER_OPS. Meaning,
 * per the field's JSON Schema type (docs/decisions.md):
 * - eq / neq: the field's JSON value equals / does not equal `value` (neq also keeps items without it);
 * - in: a scalar field equals one of `value` (an array);
 * - contains: an array field holds `value` (or every element of an array `value`); a string
 *   field contains the text `value`, ignoring case;
 * - contains_any: an array field holds any element of `value`; a string field contains any of
 *   the texts in `value`, ignoring case;
 * - gt, gte, lt, lte: numeric fields compare numbers, string fields compare text (code-point order).
 */
import type { Domain, FieldInfo } from '../network/config.ts';
import { MAX_FILTER_VALUES, type FilterOp } from './request.ts';

export interface ResolvedFilter {
  field: FieldInfo;
  op: FilterOp;
  value: unknown;
}

const TARGET = /^item_state\.([^.]+)$/;

function kindOf(field: FieldInfo): 'string' | 'number' | 'integer' | 'boolean' {
  return field.kind === 'array' ? field.itemKind ?? 'string' : field.kind;
}

function fits(value: unknown, kind: ReturnType<typeof kindOf>): boolean {
  if (kind === 'string') return typeof value === 'string';
  if (kind === 'boolean') return typeof value === 'boolean';
  if (typeof value !== 'number' || !Number.isFinite(value)) return false;
  return kind === 'number' || Number.isInteger(value);
}

const article = (kind: string) => (kind === 'integer' ? 'an integer' : `a ${kind}`);

/**
 * Checks one filter against `domain`.
 * @returns the resolved filter, or a message saying what is wrong with target or value.
 */
export function resolveFilter(domain: Domain, filter: { op: FilterOp; target: string; value: unknown }): ResolvedFilter | { error: string; on: 'target' | 'value' } {
  const name = TARGET.exec(filter.target)?.[1];
  const field = name ? domain.fields.find((f) => f.name === name && !f.private) : undefined;
  if (!field) {
    const known = domain.fields.filter((f) => !f.private).map((f) => `item_state.${f.name}`).join(', ');
    return { on: 'target', error: `unknown target "${filter.target}"; ${domain.name} items can be filtered on ${known}` };
  }
  const { op, value } = filter;
  const kind = kindOf(field);
  const isArrayField = field.kind === 'array';
  const list = (v: unknown): v is unknown[] => Array.isArray(v) && v.length >= 1 && v.length <= MAX_FILTER_VALUES;
  const inEnum = (v: unknown) => !field.enum || field.enum.includes(v as string | number);
  const bad = (message: string) => ({ on: 'value' as const, error: message });
  const listOf = (what: string) => `a list of 1 to ${MAX_FILTER_VALUES} ${what}`;

  switch (op) {
    case 'eq':
    case 'neq':
      if (isArrayField) {
        if (!Array.isArray(value) || value.length > MAX_FILTER_VALUES || !value.every((v) => fits(v, kind))) {
          return bad(`${op} on ${field.name} needs a list of at most ${MAX_FILTER_VALUES} ${kind} values (use contains for one element)`);
        }
        return { field, op, value };
      }
      if (!fits(value, kind)) return bad(`${op} on ${field.name} needs ${article(kind)}`);
      if (!inEnum(value)) return bad(`${field.name} is one of ${field.enum!.join(', ')}`);
      return { field, op, value };
    case 'in':
      if (isArrayField) return bad(`in does not apply to the list field ${field.name}; use contains_any`);
      if (!list(value) || !value.every((v) => fits(v, kind))) return bad(`in on ${field.name} needs ${listOf(`${kind} values`)}`);
      return { field, op, value };
    case 'contains':
      if (isArrayField) {
        const values = Array.isArray(value) ? value : [value];
        if (!values.length || values.length > MAX_FILTER_VALUES || !values.every((v) => fits(v, kind))) {
          return bad(`contains on ${field.name} needs ${article(kind)} or ${listOf(`${kind} values`)}`);
        }
        return { field, op, value: values };
      }
      if (kind !== 'string') return bad(`contains applies to text and list fields, not to ${field.name}`);
      if (typeof value !== 'string' || value === '') return bad(`contains on ${field.name} needs a non-empty string`);
      return { field, op, value };
    case 'contains_any':
      if (!isArrayField && kind !== 'string') return bad(`contains_any applies to text and list fields, not to ${field.name}`);
      if (!list(value) || !value.every((v) => fits(v, kind) && v !== '')) return bad(`contains_any on ${field.name} needs ${listOf(`${kind} values`)}`);
      return { field, op, value };
    default:
      if (isArrayField || kind === 'boolean') return bad(`${op} applies to number and text fields, not to ${field.name}`);
      if (kind === 'string' ? typeof value !== 'string' : !fits(value, 'number')) return bad(`${op} on ${field.name} needs ${article(kind === 'string' ? 'string' : 'number')}`);
      return { field, op, value };
  }
}

/** SQL condition for `f` on the row alias `a`; `p` adds a parameter and returns its placeholder. */
export function filterSql(f: ResolvedFilter, a: string, p: (value: unknown) => string): string {
  // Placeholders are added only where used: a statement must use every parameter it is sent.
  const name = () => `${p(f.field.name)}::text`;
  const jsonOf = () => `${a}.item_state -> ${name()}`;
  const textOf = () => `${a}.item_state ->> ${name()}`;
  const isArrayField = f.field.kind === 'array';
  // Scalar equality as containment (`@>`), which the GIN jsonb_path_ops index on item_state serves
  // (sql/011_search_ann.sql); for a scalar field the two mean the same.
  const contains = (value: unknown) => `${a}.item_state @> ${p(JSON.stringify({ [f.field.name]: value }))}::jsonb`;
  switch (f.op) {
    case 'eq':
      return isArrayField ? `${jsonOf()} = ${p(JSON.stringify(f.value))}::jsonb` : contains(f.value);
    case 'neq':
      return `${jsonOf()} IS DISTINCT FROM ${p(JSON.stringify(f.value))}::jsonb`;
    case 'in':
      return `(${(f.value as unknown[]).map(contains).join(' OR ')})`;
    case 'contains':
      return isArrayField
        ? `${jsonOf()} @> ${p(JSON.stringify(f.value))}::jsonb`
        : `strpos(lower(${textOf()}), ${p((f.value as string).toLowerCase())}) > 0`;
    case 'contains_any': {
      const values = p(isArrayField ? JSON.stringify(f.value) : (f.value as string[]).map((v) => v.toLowerCase()));
      return isArrayField
        ? `EXISTS (SELECT 1 FROM jsonb_array_elements(${values}::jsonb) AS x(v) WHERE ${jsonOf()} @> jsonb_build_array(x.v))`
        : `EXISTS (SELECT 1 FROM unnest(${values}::text[]) AS x(v) WHERE strpos(lower(${textOf()}), x.v) > 0)`;
    }
    default: {
      const cmp = { gt: '>', gte: '>=', lt: '<', lte: '<=' }[f.op];
      if (f.field.kind === 'string') return `(${textOf()}) COLLATE "C" ${cmp} ${p(f.value)}::text`;
      const json = jsonOf();
      return `(CASE WHEN jsonb_typeof(${json}) = 'number' THEN (${json})::numeric END) ${cmp} ${p(f.value)}::numeric`;
    }
  }
}
