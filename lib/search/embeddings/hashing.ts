/**
 * The built-in `hashing` embedding provider (DESIGN.md "Real parts"): character n-gram feature
 * hashing into a fixed-size unit vector. Offline, deterministic, and tolerant of misspellings
 * ("veternary" shares most of its n-grams with "veterinary"); it knows no synonyms.
 *
 * Features of each word (lower-cased, accents removed, split on anything that is not a letter or
 * a digit): its character 3- and 4-grams with `<` `>` marking the word's ends, plus the whole
 * word. Each feature adds ±weight to one dimension chosen by a 32-bit hash (the "hashing trick"
 * of Weinberger et al. 2009, with a sign hash so collisions cancel instead of pile up); the vector
 * is then L2-normalised.
 */
import type { ModelVersion } from '../../network/model-version.ts';

/** Version of the feature scheme: change it whenever the vectors it produces change. */
const SCHEME = 'ldp-hashing-ngram-v1';
const WORD = /[\p{L}\p{N}]+/gu;
/** Weight of the whole-word feature relative to one n-gram: exact words count more than shared fragments. */
const WORD_WEIGHT = 2;

/** 32-bit FNV-1a over UTF-16 code units, then murmur3's finaliser to spread the bits. */
function hash32(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** Lower-cased words of `text` without diacritics (NFKD, combining marks removed). */
export function words(text: string): string[] {
  return text.normalize('NFKD').replace(/\p{M}/gu, '').toLowerCase().match(WORD) ?? [];
}

/**
 * Embeds one text into a unit vector of `dimensions`. Pure and deterministic: the same text always
 * gives the same vector. A text without words gets the vector of one fixed feature, so that every
 * vector has unit length.
 */
export function hashingVector(text: string, dimensions: number): Float32Array {
  const v = new Float64Array(dimensions);
  const add = (feature: string, weight: number) => {
    const h = hash32(feature);
    // The low bits choose the dimension, the top bit the sign.
    v[(h & 0x7fffffff) % dimensions] += h & 0x80000000 ? -weight : weight;
  };
  const found = words(text);
  if (found.length === 0) add('<empty>', 1);
  for (const word of found) {
    add(`w:${word}`, WORD_WEIGHT);
    const padded = `<${word}>`;
    if (padded.length <= 4) {
      add(padded, 1);
      continue;
    }
    for (const n of [3, 4]) {
      for (let i = 0; i + n <= padded.length; i++) add(padded.slice(i, i + n), 1);
    }
  }
  let norm = 0;
  for (const x of v) norm += x * x;
  norm = Math.sqrt(norm);
  const out = new Float32Array(dimensions);
  if (norm > 0) for (let i = 0; i < dimensions; i++) out[i] = v[i] / norm;
  return out;
}

/** Model version of the hashing provider with `dimensions`. */
export function hashingModelVersion(dimensions: number): ModelVersion {
  return { model_id: SCHEME, quantization: 'none', dimensions };
}
