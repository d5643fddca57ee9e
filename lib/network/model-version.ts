/**
 * The embedding model version recorded with every index entry (DESIGN.md "Real parts":
 * relevance refuses to compare vectors of different versions; a model change re-indexes).
 */

/** Which model produced a vector: the model id, its quantisation (dtype) and its dimension count. */
export interface ModelVersion {
  /** e.g. `Xenova/all-MiniLM-L6-v2`, or `ldp-hashing-ngram-v1` for the built-in hashing provider. */
  model_id: string;
  /** e.g. `fp32`, `q8`; `none` for the hashing provider. */
  quantization: string;
  dimensions: number;
}

/** Whether vectors of `a` and `b` are comparable: same model id, quantisation and dimensions. */
export function sameModelVersion(a: ModelVersion, b: ModelVersion): boolean {
  return a.model_id === b.model_id && a.quantization === b.quantization && a.dimensions === b.dimensions;
}

/** `model_id@quantization/dimensions`, for logs, `/ready` and error messages. */
export function formatModelVersion(v: ModelVersion): string {
  return `${v.model_id}@${v.quantization}/${v.dimensions}`;
}
