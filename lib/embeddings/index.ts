/** Embeddings: the providers (transformers.js, built-in hashing) and the model version shape. */
export { formatModelVersion, sameModelVersion, type ModelVersion } from './model-version.ts';
export { createEmbeddingProvider, createHashingProvider, HASHING_DIMENSIONS, type EmbeddingProvider } from './provider.ts';
