/**
 * The local match score between two items (spec "POST /api/v1/match-score/calculate", provider
 * `local`): a 0..100 score from explainable signals, each with a documented weight
 * (docs/decisions.md, "Match score:" bullets):
 * - semantic similarity (weight 0.5): cosine similarity of the two items' embeddings from the
 *   search index, clamped to 0..1 (the same model version on both sides is required);
 * - matchable fields (0.3): for every field marked `x-matchable` in both items' domains (by name)
 *   with values on both sides, the share of values in common (scalars: equal or not; arrays:
 *   shared values / the shorter list), case-insensitive; the component is their mean;
 * - distance (0.2): exp(-d / 20 km) for the distance d between their nearest locations.
 * The score is the weighted mean of the components that had data; `confidence` (0..1) is the share
 * of the total weight whose data was there.
 */
import { cosineSimilarity } from '../network/cosine.ts';
import { formatModelVersion, type ModelVersion } from '../network/model-version.ts';
import type { Domain } from '../network/config.ts';
import { EARTH_RADIUS_M, type GeoPoint } from '../network/geo.ts';
import type { IndexEntry } from '../clients/search-client.ts';

/** Version of this scoring scheme (weights, scales, wording); change it whenever scores change. */
export const MATCH_SCORE_VERSION = 'local-1.0.0';
export const MATCH_WEIGHTS = { semantic: 0.5, fields: 0.3, distance: 0.2 } as const;
/** Distance at which the distance component falls to 1/e (about 0.37). */
export const DISTANCE_SCALE_METERS = 20_000;
const NEAR_METERS = 10_000;
const FAR_METERS = 50_000;
const SEMANTIC_CLOSE = 0.45;
const SEMANTIC_DISTANT = 0.2;

export interface MatchBands {
  strong: number;
  good: number;
  fair: number;
}
export type MatchBand = 'strong' | 'good' | 'fair' | 'weak';

/** One item as the score sees it. */
export interface MatchSide {
  domain: Domain;
  /** The state whose matchable fields are compared. */
  state: Record<string, unknown>;
  /** Where the item is (may be empty). */
  locations: GeoPoint[];
  entry: IndexEntry;
}

export interface MatchSignal {
  name: string;
  impact: 'positive' | 'negative' | 'neutral';
  summary: string;
}

export interface MatchScore {
  score: number;
  band: MatchBand;
  confidence: number;
  version: string;
  model: string;
  signals: MatchSignal[];
  reasoning: string;
  /** The inputs of the score: similarities, distances, field overlaps, weights. */
  raw: Record<string, unknown>;
}


/** Haversine distance in metres on the mean Earth radius (EARTH_RADIUS_M), as in the SQL functions. */
export function distanceMeters(a: GeoPoint, b: GeoPoint): number {
  const rad = (d: number) => (d * Math.PI) / 180;
  const h = Math.sin(rad(b.lat - a.lat) / 2) ** 2 + Math.cos(rad(a.lat)) * Math.cos(rad(b.lat)) * Math.sin(rad(b.lng - a.lng) / 2) ** 2;
  return 2 * EARTH_RADIUS_M * Math.asin(Math.min(1, Math.sqrt(h)));
}

/** The band of `score` under `bands` (least score of each band). */
export function bandOf(score: number, bands: MatchBands): MatchBand {
  return score >= bands.strong ? 'strong' : score >= bands.good ? 'good' : score >= bands.fair ? 'fair' : 'weak';
}

const normalise = (v: unknown) => String(v).trim().replace(/\s+/g, ' ').toLowerCase();
/** The values of a field as display strings (an array's items, or the single value); empty when absent. */
function valuesOf(value: unknown): string[] {
  const list = Array.isArray(value) ? value : value === undefined || value === null ? [] : [value];
  return list.map((v) => String(v).trim()).filter((v) => v !== '');
}

interface FieldComparison {
  field: string;
  label: string;
  a: string[];
  b: string[];
  shared: string[];
  /** 0..1, or null when a side has no value. */
  overlap: number | null;
}

function compareFields(a: MatchSide, b: MatchSide): FieldComparison[] {
  const comparisons: FieldComparison[] = [];
  for (const fa of a.domain.fields) {
    const fb = b.domain.fields.find((f) => f.name === fa.name);
    if (!fa.matchable || !fb?.matchable) continue;
    const va = valuesOf(a.state[fa.name]);
    const vb = valuesOf(b.state[fb.name]);
    const setB = new Set(vb.map(normalise));
    const shared = va.filter((v) => setB.has(normalise(v)));
    const label = fa.label === fb.label ? fa.label : `${fa.label} / ${fb.label}`;
    const overlap = va.length && vb.length ? shared.length / Math.min(va.length, vb.length) : null;
    comparisons.push({ field: fa.name, label, a: va, b: vb, shared, overlap });
  }
  return comparisons;
}

function fieldSignal(c: FieldComparison, scalar: boolean): MatchSignal | null {
  if (c.overlap === null) return null;
  const name = `field:${c.field}`;
  if (scalar) {
    return c.overlap === 1
      ? { name, impact: 'positive', summary: `same ${c.label}: ${c.a[0]}` }
      : { name, impact: 'negative', summary: `${c.label} differs: ${c.a[0]} vs ${c.b[0]}` };
  }
  return c.shared.length
    ? { name, impact: 'positive', summary: `${c.label} in common: ${c.shared.join(', ')}` }
    : { name, impact: 'negative', summary: `no ${c.label} in common (${c.a.join(', ')} vs ${c.b.join(', ')})` };
}

function formatDistance(meters: number): string {
  if (meters < 1000) return `${Math.round(meters)} m`;
  return `${meters < 10_000 ? (meters / 1000).toFixed(1) : Math.round(meters / 1000)} km`;
}

const round = (n: number, digits: number) => Math.round(n * 10 ** digits) / 10 ** digits;

/**
 * Scores `a` against `b`. Both entries must carry embeddings of the same model version (the caller
 * checks; relevance follows the same rule, DESIGN.md "Real parts").
 */
export function computeMatchScore(a: MatchSide, b: MatchSide, bands: MatchBands): MatchScore {
  const signals: MatchSignal[] = [];
  const cosine = cosineSimilarity(a.entry.embedding, b.entry.embedding);
  const semantic = Math.min(1, Math.max(0, cosine));
  const cosineText = `cosine similarity ${cosine.toFixed(2)}`;
  signals.push(cosine >= SEMANTIC_CLOSE
    ? { name: 'semantic_similarity', impact: 'positive', summary: `profiles are semantically close (${cosineText})` }
    : cosine < SEMANTIC_DISTANT
      ? { name: 'semantic_similarity', impact: 'negative', summary: `profiles have little in common semantically (${cosineText})` }
      : { name: 'semantic_similarity', impact: 'neutral', summary: `profiles are somewhat related (${cosineText})` });

  let distance: number | null = null;
  for (const la of a.locations) for (const lb of b.locations) distance = Math.min(distance ?? Infinity, distanceMeters(la, lb));
  const distanceScore = distance === null ? null : Math.exp(-distance / DISTANCE_SCALE_METERS);
  if (distance !== null) {
    const apart = `${formatDistance(distance)} apart`;
    signals.push({ name: 'distance', impact: distance <= NEAR_METERS ? 'positive' : distance <= FAR_METERS ? 'neutral' : 'negative', summary: apart });
  }

  const fields = compareFields(a, b);
  const compared = fields.filter((f) => f.overlap !== null);
  for (const c of compared) {
    const scalar = a.domain.fields.find((f) => f.name === c.field)!.kind !== 'array' && b.domain.fields.find((f) => f.name === c.field)!.kind !== 'array';
    const signal = fieldSignal(c, scalar);
    if (signal) signals.push(signal);
  }
  const fieldsScore = compared.length ? compared.reduce((sum, c) => sum + c.overlap!, 0) / compared.length : null;

  const components = {
    semantic: { score: semantic, weight: MATCH_WEIGHTS.semantic, coverage: 1 },
    fields: { score: fieldsScore, weight: MATCH_WEIGHTS.fields, coverage: fields.length ? compared.length / fields.length : null },
    distance: { score: distanceScore, weight: MATCH_WEIGHTS.distance, coverage: distance === null ? 0 : 1 },
  };
  const present = Object.values(components).filter((c) => c.score !== null);
  const score = Math.round((100 * present.reduce((s, c) => s + c.weight * c.score!, 0)) / present.reduce((s, c) => s + c.weight, 0));
  const applicable = Object.values(components).filter((c) => c.coverage !== null);
  const confidence = round(applicable.reduce((s, c) => s + c.weight * c.coverage!, 0) / applicable.reduce((s, c) => s + c.weight, 0), 2);
  const band = bandOf(score, bands);

  const list = (impact: MatchSignal['impact']) => signals.filter((s) => s.impact === impact).map((s) => s.summary).join('; ');
  const reasoning = [
    `${band[0].toUpperCase()}${band.slice(1)} match, ${score} of 100.`,
    list('positive') && `For it: ${list('positive')}.`,
    list('negative') && `Against it: ${list('negative')}.`,
    list('neutral') && `Also: ${list('neutral')}.`,
    distance === null && 'Distance not compared: an item has no location.',
  ].filter(Boolean).join(' ');

  const model: ModelVersion = a.entry.model;
  return {
    score, band, confidence, version: MATCH_SCORE_VERSION, model: model.model_id, signals, reasoning,
    raw: {
      cosine_similarity: round(cosine, 6),
      distance_meters: distance === null ? null : round(distance, 1),
      distance_scale_meters: DISTANCE_SCALE_METERS,
      fields: fields.map(({ label: _label, ...f }) => ({ ...f, overlap: f.overlap === null ? null : round(f.overlap, 4) })),
      components: Object.fromEntries(Object.entries(components).map(([k, c]) => [k, {
        score: c.score === null ? null : round(c.score, 4), weight: c.weight, coverage: c.coverage === null ? null : round(c.coverage, 4),
      }])),
      bands,
      model_version: formatModelVersion(model),
      indexed_at: { itemA: a.entry.indexed_at, itemB: b.entry.indexed_at },
    },
  };
}
