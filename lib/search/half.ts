/**
 * Embeddings as stored in `search.items` (sql/015_search_f16.sql): n IEEE 754 binary16 values,
 * big-endian (pgvector's halfvec_send layout after its 4-byte header), read through
 * `search.embedding_f16(embedding)` on both backends. Encoding rounds to nearest, ties to even
 * (IEEE 754 §4.3.1), like search.f16_of in SQL and @petamoriken/float16 (the ECMAScript Float16
 * proposal), which decodes and is the test's reference. Half precision keeps 11 significant bits:
 * cosines of unit vectors move by about 1e-3 at most, below what ranking or the similarity
 * threshold needs.
 */

import { getFloat16 } from '@petamoriken/float16';

const F32 = new Float32Array(1);
const F32_BITS = new Uint32Array(F32.buffer);

/** `bits >>> shift` rounded to nearest, ties to even. */
function shiftRounded(bits: number, shift: number): number {
  const kept = bits >>> shift;
  const rest = bits & ((1 << shift) - 1);
  const half = 1 << (shift - 1);
  return rest > half || (rest === half && (kept & 1)) ? kept + 1 : kept;
}

/**
 * The binary16 bits of `value` (as a float32 first, as the embeddings are). Bit arithmetic rather
 * than the library's `setFloat16`, which cost ~6 µs a value — 2.4 s of the worker's CPU per 1,000
 * vectors of 384 dimensions when indexing, against ~12 ms here; bit-identical (test/search/half.test.ts).
 */
export function halfBits(value: number): number {
  F32[0] = value;
  const x = F32_BITS[0];
  const sign = (x >>> 16) & 0x8000;
  const exponent = (x >>> 23) & 0xff;
  const mantissa = x & 0x7fffff;
  if (exponent === 0xff) return sign | (mantissa ? 0x7e00 : 0x7c00); // NaN, ±Infinity
  const e = exponent - 127 + 15;
  if (e >= 31) return sign | 0x7c00; // past the largest half: ±Infinity
  // A carry out of the mantissa moves to the next exponent (or to Infinity from the largest).
  if (e > 0) return sign | shiftRounded((e << 23) | mantissa, 13);
  if (e < -10) return sign; // under half the smallest subnormal: ±0
  return sign | shiftRounded(mantissa | 0x800000, 14 - e); // a subnormal half
}

/** `vectors` concatenated as big-endian binary16 (the bytea the usearch backend stores, one slice per row). */
export function encodeHalf(vectors: Float32Array[]): Buffer {
  const count = vectors.reduce((n, v) => n + v.length, 0);
  const buf = Buffer.allocUnsafe(count * 2);
  let at = 0;
  for (const v of vectors) for (let i = 0; i < v.length; i++, at += 2) buf.writeUInt16BE(halfBits(v[i]), at);
  return buf;
}

/** Lookup of every binary16 value, so decoding is one table read per element. */
const HALF_VALUES = (() => {
  const table = new Float32Array(65536);
  const view = new DataView(new ArrayBuffer(2));
  for (let h = 0; h < 65536; h++) {
    view.setUint16(0, h);
    table[h] = getFloat16(view, 0);
  }
  return table;
})();

/** A stored embedding (big-endian binary16 bytes, from search.embedding_f16) as floats. */
export function decodeHalf(bytes: Uint8Array): Float32Array {
  const n = bytes.byteLength >> 1;
  const out = new Float32Array(n);
  for (let i = 0, at = 0; i < n; i++, at += 2) out[i] = HALF_VALUES[(bytes[at] << 8) | bytes[at + 1]];
  return out;
}

/**
 * Cosine similarity of `a` and a stored embedding (big-endian binary16 bytes) without decoding it
 * into an array first: the same arithmetic in the same order as `cosineSimilarity(a, decodeHalf(bytes))`,
 * so the same value. 0 when either is all zeros.
 * @throws Error when the lengths differ (vectors of different model versions).
 */
export function cosineToHalf(a: Float32Array, bytes: Uint8Array): number {
  const n = bytes.byteLength >> 1;
  if (a.length !== n) throw new Error(`cannot compare vectors of ${a.length} and ${n} dimensions`);
  let dot = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0, at = 0; i < n; i++, at += 2) {
    const x = a[i];
    const y = HALF_VALUES[(bytes[at] << 8) | bytes[at + 1]];
    dot += x * y;
    na += x * x;
    nb += y * y;
  }
  return na === 0 || nb === 0 ? 0 : dot / Math.sqrt(na * nb);
}

/** `v` rounded to binary16 and back: the vector as stored. */
export function roundToHalf(v: Float32Array): Float32Array {
  return decodeHalf(encodeHalf([v]));
}
