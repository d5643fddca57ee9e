/**
 * The `transformers` embedding provider: a real sentence-embedding model run on the CPU by
 * transformers.js (@huggingface/transformers, ONNX Runtime), with mean pooling and L2
 * normalisation as for sentence-transformers models (library docs, "feature-extraction" pipeline).
 */
import path from 'node:path';
import { env, pipeline, type FeatureExtractionPipeline } from '@huggingface/transformers';
import type { ModelVersion } from './model-version.ts';

export interface TransformersOptions {
  /** Model id, e.g. `Xenova/all-MiniLM-L6-v2`; its files live in `<modelPath>/<model>/` when offline. */
  model: string;
  /** Folder of local models (transformers.js `env.localModelPath`); when set, nothing is downloaded. */
  modelPath?: string;
  /** Where a downloaded model is cached (transformers.js `env.cacheDir`). */
  cacheDir: string;
  /** Weights variant (transformers.js `dtype`, e.g. fp32, q8). */
  dtype: string;
  /** Texts per model call. */
  batchSize: number;
}

export interface TransformersModel {
  version: ModelVersion;
  /** Unit vectors for `texts`, in order. */
  embed(texts: string[]): Promise<Float32Array[]>;
  dispose(): Promise<void>;
}

/**
 * Loads the model (from `modelPath` only, or the cache, or the model hub once) and probes it for
 * its dimension count.
 * @throws Error from transformers.js when the files cannot be found, fetched or run.
 */
export async function loadTransformersModel(options: TransformersOptions): Promise<TransformersModel> {
  // env is transformers.js's process-wide configuration; one model is loaded per process.
  if (options.modelPath) {
    env.localModelPath = path.resolve(options.modelPath) + path.sep;
    env.allowLocalModels = true;
    env.allowRemoteModels = false;
  } else {
    env.allowLocalModels = false;
    env.allowRemoteModels = true;
    env.cacheDir = options.cacheDir;
  }
  const extractor: FeatureExtractionPipeline = await pipeline('feature-extraction', options.model, {
    dtype: options.dtype as 'fp32',
  });
  const run = async (texts: string[]): Promise<Float32Array[]> => {
    const output = await extractor(texts, { pooling: 'mean', normalize: true });
    const [rows, dims] = output.dims as [number, number];
    const data = output.data as Float32Array;
    return Array.from({ length: rows }, (_, i) => data.slice(i * dims, (i + 1) * dims));
  };
  const [probe] = await run(['dimension probe']);
  return {
    version: { model_id: options.model, quantization: options.dtype, dimensions: probe.length },
    async embed(texts) {
      const out: Float32Array[] = [];
      for (let i = 0; i < texts.length; i += options.batchSize) out.push(...await run(texts.slice(i, i + options.batchSize)));
      return out;
    },
    dispose: () => extractor.dispose(),
  };
}
