/** Embeddings: the providers (transformers.js, built-in hashing), the model version shape, cosine similarity. */
export { cosineSimilarity } from '../../network/cosine.ts';
export { formatModelVersion, sameModelVersion, type ModelVersion } from '../../network/model-version.ts';
export { createEmbeddingProvider, createHashingProvider, HASHING_DIMENSIONS, type EmbeddingProvider } from './provider.ts';
