/**
 * Embeddings as stored in `search.items` (sql/015_search_f16.sql): n IEEE 754 binary16 values,
 * big-endian (pgvector's halfvec_send layout after its 4-byte header), read through
 * `search.embedding_f16(embedding)` on both backends. Conversion (@petamoriken/float16, the
 * ECMAScript Float16 proposal's rounding) rounds to nearest, ties to even, like search.f16_of in
 * SQL. Half precision keeps 11 significant bits: cosines of unit vectors move by about 1e-3 at
 * most, below what ranking or the similarity threshold needs.
 */

import { getFloat16, setFloat16 } from '@petamoriken/float16';

/** `vectors` concatenated as big-endian binary16 (the bytea the usearch backend stores, one slice per row). */
export function encodeHalf(vectors: Float32Array[]): Buffer {
  const count = vectors.reduce((n, v) => n + v.length, 0);
  const buf = Buffer.allocUnsafe(count * 2);
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  let at = 0;
  for (const v of vectors) for (let i = 0; i < v.length; i++, at += 2) setFloat16(view, at, v[i]);
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

/** `v` rounded to binary16 and back: the vector as stored. */
export function roundToHalf(v: Float32Array): Float32Array {
  return decodeHalf(encodeHalf([v]));
}
