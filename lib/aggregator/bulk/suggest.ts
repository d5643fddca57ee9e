/**
 * Mapping suggestions for a file (issue 17, `POST /v1/bulk-uploads/{id}/match`): per schema field,
 * the column that matches it (by the mapping, or by header matching — lib/aggregator/bulk/header-match.ts),
 * else up to three candidate columns with a score; the columns left unmatched; the required fields
 * without a match; and a mapping built from the matches and the good candidates.
 *
 * A candidate's score (0..1) weighs two signals equally:
 * - name: Dice similarity of letter pairs (Sørensen–Dice on bigrams) between the normalised header
 *   and the field's name, label or aliases, at least 0.8 when one contains the other (`Dist` /
 *   `district`);
 * - values: the share of the sampled non-empty cells that would pass the field (its coercion and
 *   the schema's rules for that property, with the same Ajv validator as the upload).
 * A column with no name likeness (< 0.3) is a candidate only for a field whose values are
 * constrained (closed set, number, boolean, phone, e-mail) and when ≥ 80 % of its values pass.
 *
 * They are computed once per upload by the worker (task SUGGEST_TASK, tasks/bulk-upload-suggest.ts,
 * enqueued with the job) and stored in aggregator.bulk_uploads.match_suggestions (sql/021): the API
 * and the console only read them (issue 29).
 */
import type { Domain, FieldInfo, Network } from '../../network/config.ts';
import type { Queryable } from '../../platform/db.ts';
import { enqueue } from '../../platform/jobs.ts';
import { fieldNamesOf, knownHeaders, normalizeHeader } from './header-match.ts';
import { fieldSpecs, headerEntries, type FieldSpec, type Mapping } from './mapping.ts';
import { Bad, fieldConverter } from './row-coercion.ts';

export interface Candidate {
  column: string;
  score: number;
  name_score: number;
  value_score: number | null;
}

export interface FieldSuggestion {
  field: string;
  label: string;
  required: boolean;
  /** How the field is given now: a column (by the mapping or by its header) or a field spec; null when not. */
  matched: { column?: string; spec?: FieldSpec; by: 'mapping' | 'header' } | null;
  /** Up to three columns, best first (only when `matched` is null). */
  candidates: Candidate[];
}

export interface Suggestions {
  fields: FieldSuggestion[];
  unmatched_columns: string[];
  required_unmatched: string[];
  /** The mapping the matches and the candidates scoring ≥ 0.5 make (field → {column}), to review and save. */
  suggested_mapping: Mapping;
  sampled_rows: number;
}

/** Task identifier (tasks/bulk-upload-suggest.ts); payload {upload_id}. */
export const SUGGEST_TASK = 'bulk-upload-suggest';
/** Data rows read for the value checks (a bounded read of the file's start). */
export const MATCH_SAMPLE_ROWS = 100;

/** What is stored per upload: the suggestions with the file's headers, or why the file could not be read. */
export type StoredSuggestions = ({ headers: string[] } & Suggestions) | { file_problem: string };

/** Enqueues the computation of upload `uploadId`'s suggestions through `db` (the transaction recording the job). */
export async function enqueueSuggestions(db: Queryable, uploadId: string): Promise<void> {
  await enqueue(db, { task: SUGGEST_TASK, payload: { upload_id: uploadId }, jobKey: `${SUGGEST_TASK}:${uploadId}` });
}

/** Stores the suggestions (or file problem) of upload `uploadId`; a second store changes nothing. */
export async function storeSuggestions(db: Queryable, uploadId: string, stored: StoredSuggestions): Promise<void> {
  await db.query('UPDATE aggregator.bulk_uploads SET match_suggestions = $2 WHERE upload_id = $1 AND match_suggestions IS NULL',
    [uploadId, JSON.stringify(stored)]);
}

/** The stored suggestions of upload `uploadId`, or null while the task has not run. */
export async function loadSuggestions(db: Queryable, uploadId: string): Promise<StoredSuggestions | null> {
  const { rows } = await db.query<{ match_suggestions: StoredSuggestions | null }>(
    'SELECT match_suggestions FROM aggregator.bulk_uploads WHERE upload_id = $1', [uploadId]);
  return rows[0]?.match_suggestions ?? null;
}

const MAX_CANDIDATES = 3;
const MIN_SCORE = 0.2;
const GOOD_SCORE = 0.5;

/** Sørensen–Dice similarity of the letter pairs of two normalised strings (0..1). */
function dice(a: string, b: string): number {
  if (a === b) return 1;
  if (a.length < 2 || b.length < 2) return 0;
  const pairs = new Map<string, number>();
  for (let i = 0; i < a.length - 1; i++) pairs.set(a.slice(i, i + 2), (pairs.get(a.slice(i, i + 2)) ?? 0) + 1);
  let shared = 0;
  for (let i = 0; i < b.length - 1; i++) {
    const pair = b.slice(i, i + 2);
    const n = pairs.get(pair) ?? 0;
    if (n > 0) {
      shared++;
      pairs.set(pair, n - 1);
    }
  }
  return (2 * shared) / (a.length + b.length - 2);
}

function nameScore(header: string, names: string[]): number {
  const h = normalizeHeader(header);
  if (!h) return 0;
  let best = 0;
  for (const name of names) {
    let score = dice(h, name);
    const [short, long] = h.length <= name.length ? [h, name] : [name, h];
    if (short.length >= 3 && long.includes(short)) score = Math.max(score, 0.8);
    best = Math.max(best, score);
  }
  return best;
}

const round = (n: number) => Math.round(n * 100) / 100;

/**
 * Suggests how `headers` (with `sample`, the first data rows' values) map to the fields of
 * `domain`, taking `mapping` (the job's, may be null) as given. Never throws for file content.
 */
export function suggestMapping(network: Network, domain: Domain, headers: string[], sample: string[][], mapping: Mapping | null): Suggestions {
  const specs = fieldSpecs(mapping);
  const entries = headerEntries(mapping);
  const known = knownHeaders(domain.fields);
  const columnOf = new Map<string, { index: number; by: 'mapping' | 'header' }>();
  const used = new Set<number>();
  for (const spec of specs.values()) {
    for (const column of spec.columns ?? (spec.column !== undefined ? [spec.column] : [])) {
      const index = headers.findIndex((h) => h === column || normalizeHeader(h) === normalizeHeader(column));
      if (index !== -1) used.add(index);
    }
  }
  headers.forEach((header, index) => {
    if (header === '' || used.has(index)) return;
    const byMap = Object.entries(entries).find(([key]) => key === header || normalizeHeader(key) === normalizeHeader(header));
    const field = byMap ? byMap[1] : domain.fields.some((f) => f.name === header) ? header : known.get(normalizeHeader(header)) ?? null;
    if (byMap) used.add(index);
    if (field === null || specs.has(field) || columnOf.has(field)) return;
    columnOf.set(field, { index, by: byMap ? 'mapping' : 'header' });
    used.add(index);
  });

  const free = headers.map((h, index) => ({ h, index })).filter(({ h, index }) => h !== '' && !used.has(index));
  const fields: FieldSuggestion[] = domain.fields.map((field) => {
    const base = { field: field.name, label: field.label, required: field.required };
    const spec = specs.get(field.name);
    if (spec) return { ...base, matched: { spec, by: 'mapping' as const }, candidates: [] };
    const column = columnOf.get(field.name);
    if (column) return { ...base, matched: { column: headers[column.index], by: column.by }, candidates: [] };
    const passes = valueCheck(network, domain, field);
    const names = fieldNamesOf(field);
    const candidates = free.map(({ h, index }) => {
      const name = nameScore(h, names);
      const values = sample.map((row) => row[index] ?? '').filter((v) => v !== '');
      const share = values.length ? values.filter(passes).length / values.length : null;
      const constrained = field.enum !== undefined || field.identity === 'phone' || field.identity === 'email' || !['string', 'array'].includes(field.kind);
      if (name < 0.3 && !(constrained && share !== null && share >= 0.8)) return null;
      const score = share === null ? name / 2 : (name + share) / 2;
      return { column: h, score: round(score), name_score: round(name), value_score: share === null ? null : round(share) };
    }).filter((c): c is Candidate => c !== null && c.score >= MIN_SCORE)
      .sort((a, b) => b.score - a.score || b.name_score - a.name_score)
      .slice(0, MAX_CANDIDATES);
    return { ...base, matched: null, candidates };
  });

  const suggested: Mapping = {};
  const taken = new Set<string>();
  for (const f of fields) {
    if (f.matched?.spec) suggested[f.field] = f.matched.spec;
    else if (f.matched?.column) {
      suggested[f.field] = { column: f.matched.column };
      taken.add(f.matched.column);
    }
  }
  // Best candidates first, so that a column goes to the field it fits best.
  const offers = fields.flatMap((f) => f.candidates.map((c) => ({ field: f.field, ...c }))).sort((a, b) => b.score - a.score);
  for (const offer of offers) {
    if (offer.score < GOOD_SCORE || suggested[offer.field] || taken.has(offer.column)) continue;
    suggested[offer.field] = { column: offer.column };
    taken.add(offer.column);
  }
  const matchedColumns = new Set<number>(used);
  return {
    fields,
    unmatched_columns: headers.filter((h, i) => h !== '' && !matchedColumns.has(i)),
    required_unmatched: fields.filter((f) => f.required && !f.matched).map((f) => f.field),
    suggested_mapping: suggested,
    sampled_rows: sample.length,
  };
}

/** Whether a raw cell would pass `field`: its coercion, then the schema's rules for that property alone. */
function valueCheck(network: Network, domain: Domain, field: FieldInfo): (raw: string) => boolean {
  const convert = fieldConverter(network, field);
  const path = `/${field.name}`;
  return (raw) => {
    const value = convert(raw);
    if (value === undefined || value instanceof Bad) return false;
    if (domain.validate({ [field.name]: value })) return true;
    return !(domain.validate.errors ?? []).some((e) => e.instancePath === path || e.instancePath.startsWith(`${path}/`));
  };
}
