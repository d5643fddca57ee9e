/**
 * Binary16 encoding (lib/search/half.ts) against the reference, @petamoriken/float16's setFloat16
 * (round to nearest, ties to even): random float32 bit patterns, and the edges — zeros,
 * subnormals, ties, the largest half, overflow, Infinity and NaN (as any NaN).
 */
import { getFloat16, setFloat16 } from '@petamoriken/float16';
import { describe, expect, it } from 'vitest';
import { cosineSimilarity } from '../../lib/network/cosine.ts';
import { cosineToHalf, decodeHalf, encodeHalf, halfBits } from '../../lib/search/half.ts';

const reference = (value: number) => {
  const view = new DataView(new ArrayBuffer(2));
  setFloat16(view, 0, value);
  return view.getUint16(0);
};
const fromBits = (bits: number) => new Float32Array(new Uint32Array([bits]).buffer)[0];

describe('binary16 encoding', () => {
  it('gives the reference bits for 200,000 random float32 patterns and every edge', () => {
    const edges = [0, -0, 1, -1, 65504, 65519.99, 65520, -65520, 1e6, Infinity, -Infinity, NaN, 2 ** -14, 2 ** -24, 2 ** -25, 2 ** -25 * 1.0001,
      3 * 2 ** -26, 2 ** -26, 1 + 2 ** -11, 1 + 3 * 2 ** -11, 1 + 2 ** -11 + 2 ** -20, 0.1, -0.3333];
    let state = 1515;
    const random = () => { state = (Math.imul(state, 1664525) + 1013904223) >>> 0; return state; };
    const values = [...edges, ...Array.from({ length: 200_000 }, () => fromBits(random()))];
    // Any NaN encodes as a NaN (the reference keeps float32 payload bits; embeddings hold no NaN).
    const isNaNHalf = (bits: number) => (bits & 0x7c00) === 0x7c00 && (bits & 0x3ff) !== 0;
    const wrong = values.filter((v) => halfBits(v) !== reference(v) && !(isNaNHalf(halfBits(v)) && isNaNHalf(reference(v))));
    expect(wrong.slice(0, 5)).toEqual([]);
  });

  it('writes big-endian bytes that decode to the rounded values', () => {
    const vector = new Float32Array([0.5, -2, 1 / 3, 70000]);
    const bytes = encodeHalf([vector, new Float32Array([1])]);
    expect([...bytes.subarray(0, 4)]).toEqual([0x38, 0x00, 0xc0, 0x00]);
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    expect(Array.from(decodeHalf(bytes))).toEqual([0, 2, 4, 6, 8].map((at) => getFloat16(view, at)));
    expect(Array.from(decodeHalf(bytes))).toEqual([0.5, -2, 0.333251953125, Infinity, 1]);
  });

  it('gives the cosine of a stored vector without decoding it, the same value as decoding first', () => {
    let state = 7;
    const random = () => { state = (Math.imul(state, 1664525) + 1013904223) >>> 0; return state / 2 ** 31 - 1; };
    const query = Float32Array.from({ length: 384 }, random);
    for (let n = 0; n < 50; n++) {
      const stored = encodeHalf([Float32Array.from({ length: 384 }, random)]);
      expect(cosineToHalf(query, stored)).toBe(cosineSimilarity(query, decodeHalf(stored)));
    }
    expect(cosineToHalf(query, encodeHalf([new Float32Array(384)]))).toBe(0);
    expect(() => cosineToHalf(query, encodeHalf([new Float32Array(3)]))).toThrow(/384 and 3/);
  });
});
