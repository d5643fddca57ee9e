/** Embeddings: providers (transformers.js, built-in hashing) and the model version shape. */
export { formatModelVersion, sameModelVersion, type ModelVersion } from './model-version.ts';
