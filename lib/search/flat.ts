/**
 * The flat search body (`POST /v1/search/flat`, spec "Search service"): one level of keys, each a
 * dot-delimited canonical path into the `/v1/search` body, a numeric segment being an array index.
 * Restoring the nested body (spec rules 1–3, decisions in docs/decisions.md):
 * - each string leaf is JSON-parsed to restore its type, falling back to the raw string when it is
 *   not JSON: `"5"` → 5, `"true"` → true, `"\"5\""` → "5", `"veterinary"` → "veterinary";
 * - leaves whose canonical type is a string (every `context.*` key, textSearch, sort, op, target,
 *   item.id, geometry/orderingCenter type) keep the raw string, so that a messageId `123` or a
 *   textSearch `2024` stays text; a JSON-quoted value there is unquoted;
 * - rejected with 400: keys naming `__proto__`, `constructor` or `prototype`, empty segments,
 *   indices with leading zeros or above MAX_FLAT_INDEX, keys of more than MAX_FLAT_DEPTH segments,
 *   gaps in array indices, a key that is both a leaf and a parent, and a container that is both an
 *   array and an object. Keys are only ever used as map keys or own properties, so names such as
 *   `toString` or `valueOf` are ordinary keys (the schema then refuses them as unknown).
 */
import { SearchError } from './request.ts';

/** Largest array index accepted (no array of the search body is longer). */
export const MAX_FLAT_INDEX = 99;
/** Most segments in a key: the deepest path of the search body has 7 (`message.intent.spatial.N.geometry.coordinates.N`). */
export const MAX_FLAT_DEPTH = 10;
const FORBIDDEN = new Set(['__proto__', 'constructor', 'prototype']);
const INDEX = /^(0|[1-9]\d*)$/;

/** Canonical paths (numeric segments as `N`) whose values are strings. */
const STRING_PATHS = [
  /^context\.[^.]+$/,
  /^message\.intent\.(textSearch|sort|item\.id|orderingCenter\.type)$/,
  /^message\.intent\.filters\.N\.(op|target)$/,
  /^message\.intent\.spatial\.N\.(op|geometry\.type)$/,
];

type Node = { kind: 'array' | 'object'; children: Map<string, Node | Leaf> };
type Leaf = { kind: 'leaf'; value: unknown };

function restoreLeaf(path: string[], raw: unknown): unknown {
  if (typeof raw !== 'string') return raw;
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    return raw;
  }
  const canonical = path.map((s) => (INDEX.test(s) ? 'N' : s)).join('.');
  if (STRING_PATHS.some((re) => re.test(canonical)) && typeof parsed !== 'string') return raw;
  return parsed;
}

function build(node: Node | Leaf): unknown {
  if (node.kind === 'leaf') return node.value;
  if (node.kind === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, child] of node.children) out[k] = build(child);
    return out;
  }
  return [...node.children.entries()].sort(([a], [b]) => Number(a) - Number(b)).map(([, child]) => build(child));
}

/**
 * The nested `/v1/search` body of a flat body (to be validated by `searchBodySchema` next).
 * @throws SearchError 400 `invalid_request`, with the offending keys in `fields`.
 */
export function unflattenSearchBody(flat: unknown): unknown {
  if (typeof flat !== 'object' || flat === null || Array.isArray(flat)) {
    throw new SearchError(400, 'invalid_request', 'Invalid request body: expected a flat JSON object of dot-path keys');
  }
  const fields: Record<string, string[]> = Object.create(null);
  const problem = (key: string, message: string) => (fields[key] ??= []).push(message);
  const root: Node = { kind: 'object', children: new Map() };
  for (const [key, raw] of Object.entries(flat)) {
    const path = key.split('.', MAX_FLAT_DEPTH + 1);
    if (path.length > MAX_FLAT_DEPTH) {
      problem(key.slice(0, 200), `a key may have at most ${MAX_FLAT_DEPTH} dot-separated segments`);
      continue;
    }
    const bad = path.find((s) => s === '' || FORBIDDEN.has(s));
    if (bad !== undefined) {
      problem(key, bad === '' ? 'empty path segment' : `path segment "${bad}" is not allowed`);
      continue;
    }
    let node: Node = root;
    for (let i = 0; i < path.length; i++) {
      const segment = path[i];
      const numeric = /^\d+$/.test(segment);
      if (numeric && (!INDEX.test(segment) || Number(segment) > MAX_FLAT_INDEX)) {
        problem(key, `array index ${segment} must be a number from 0 to ${MAX_FLAT_INDEX} without leading zeros`);
        break;
      }
      const kind = numeric ? 'array' : 'object';
      if (node.children.size === 0 && node !== root) node.kind = kind;
      if (node.kind !== kind) {
        problem(key, `${path.slice(0, i).join('.') || '(root)'} is used both as an array and as an object`);
        break;
      }
      const child = node.children.get(segment);
      const last = i === path.length - 1;
      if (last) {
        if (child) problem(key, `${key} is both a value and a parent of other keys`);
        else node.children.set(segment, { kind: 'leaf', value: restoreLeaf(path, raw) });
        break;
      }
      if (child?.kind === 'leaf') {
        problem(key, `${path.slice(0, i + 1).join('.')} is both a value and a parent of other keys`);
        break;
      }
      const next: Node = child ?? { kind: 'object', children: new Map() };
      if (!child) node.children.set(segment, next);
      node = next;
    }
  }
  const checkGaps = (node: Node | Leaf, at: string) => {
    if (node.kind === 'leaf') return;
    if (node.kind === 'array') {
      const indices = [...node.children.keys()].map(Number).sort((a, b) => a - b);
      if (indices.some((n, i) => n !== i)) problem(at, `array indices of ${at} must run from 0 without gaps (found ${indices.join(', ')})`);
    }
    for (const [k, child] of node.children) checkGaps(child, at ? `${at}.${k}` : k);
  };
  checkGaps(root, '');
  if (Object.keys(fields).length) {
    const summary = Object.entries(fields).map(([k, v]) => `${k}: ${v.join(', ')}`).join('; ');
    throw new SearchError(400, 'invalid_request', `Invalid flat request body: ${summary}`, fields);
  }
  return build(root);
}
