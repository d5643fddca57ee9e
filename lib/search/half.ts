/**
 * Embeddings as stored in `search.items` (sql/015_search_f16.sql): n IEEE 754 binary16 values,
 * big-endian (pgvector's halfvec_send layout after its 4-byte header), read through
 * `search.embedding_f16(embedding)` on both backends. Conversion rounds to nearest, ties to even,
 * like search.f16_of in SQL. Half precision keeps 11 significant bits: cosines of unit vectors
 * move by about 1e-3 at most, below what ranking or the similarity threshold needs.
 */

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** The binary16 bits of `x` (round to nearest even; beyond ±65504 infinity, NaN stays NaN). */
export function toHalfBits(x: number): number {
  f32[0] = x;
  const bits = u32[0];
  const sign = (bits >>> 16) & 0x8000;
  const exp = (bits >>> 23) & 0xff;
  let mant = bits & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 31) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign; // below half the smallest subnormal
    mant |= 0x800000;
    const shift = 14 - e;
    const half = 1 << (shift - 1);
    const rest = mant & ((1 << shift) - 1);
    let out = mant >>> shift;
    if (rest > half || (rest === half && (out & 1))) out++;
    return sign | out; // a carry gives the smallest normal, as it should
  }
  let out = (e << 10) | (mant >>> 13);
  const rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && (out & 1))) out++; // a carry moves to the next exponent (or infinity)
  return sign | out;
}

/** The value of binary16 bits `h`. */
export function fromHalfBits(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 31) return mant ? NaN : sign * Infinity;
  return sign * 2 ** (exp - 15) * (1 + mant / 1024);
}

/** `vectors` concatenated as big-endian binary16 (the bytea the usearch backend stores, one slice per row). */
export function encodeHalf(vectors: Float32Array[]): Buffer {
  const count = vectors.reduce((n, v) => n + v.length, 0);
  const buf = Buffer.allocUnsafe(count * 2);
  let at = 0;
  for (const v of vectors) for (let i = 0; i < v.length; i++, at += 2) buf.writeUInt16BE(toHalfBits(v[i]), at);
  return buf;
}

/** Lookup of every binary16 value, so decoding is one table read per element. */
const HALF_VALUES = (() => {
  const table = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) table[h] = fromHalfBits(h);
  return table;
})();

/** A stored embedding (big-endian binary16 bytes, from search.embedding_f16) as floats. */
export function decodeHalf(bytes: Uint8Array): Float32Array {
  const n = bytes.byteLength >> 1;
  const out = new Float32Array(n);
  for (let i = 0, at = 0; i < n; i++, at += 2) out[i] = HALF_VALUES[(bytes[at] << 8) | bytes[at + 1]];
  return out;
}

/** `v` rounded to binary16 and back: the vector as stored. */
export function roundToHalf(v: Float32Array): Float32Array {
  return Float32Array.from(v, (x) => HALF_VALUES[toHalfBits(x)]);
}
