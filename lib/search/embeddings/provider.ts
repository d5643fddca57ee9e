/**
 * Choosing the embedding provider at start-up (DESIGN.md "Real parts", EMBEDDING_PROVIDER):
 * `transformers` when the model loads, otherwise the built-in `hashing` provider — said in the log
 * and reported by the search service's `/ready`.
 */
import path from 'node:path';
import { setImmediate as yieldToEventLoop } from 'node:timers/promises';
import type { Config } from '../../platform/config.ts';
import type { Logger } from '../../platform/logger.ts';
import { hashingModelVersion, hashingVector } from './hashing.ts';
import { formatModelVersion, type ModelVersion } from '../../network/model-version.ts';

/** Dimension count of the hashing provider (the same as all-MiniLM-L6-v2's, for comparable costs). */
export const HASHING_DIMENSIONS = 384;
/** Default textSearch similarity thresholds, measured per provider (docs/decisions.md). */
const TEXT_THRESHOLDS = { hashing: 0.2, transformers: 0.35 } as const;

export interface EmbeddingProvider {
  name: 'transformers' | 'hashing';
  version: ModelVersion;
  /** Cosine similarity from which an item matches a textSearch without containing its words. */
  textThreshold: number;
  /** Why `hashing` is used when it was not asked for (the model did not load); else undefined. */
  fallbackReason?: string;
  /** Unit vectors of `texts`, in order (Float32, `version.dimensions` long). */
  embed(texts: string[]): Promise<Float32Array[]>;
  /** Releases the model (no-op for hashing). */
  dispose(): Promise<void>;
}

/** The built-in hashing provider (lib/embeddings/hashing.ts). */
export function createHashingProvider(textThreshold: number = TEXT_THRESHOLDS.hashing, fallbackReason?: string): EmbeddingProvider {
  return {
    name: 'hashing',
    version: hashingModelVersion(HASHING_DIMENSIONS),
    textThreshold,
    fallbackReason,
    async embed(texts) {
      const out: Float32Array[] = [];
      for (let i = 0; i < texts.length; i++) {
        out.push(hashingVector(texts[i], HASHING_DIMENSIONS));
        // Long batches must not hold up HTTP requests served by the same process.
        if (i % 512 === 511) await yieldToEventLoop();
      }
      return out;
    },
    dispose: async () => {},
  };
}

function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} took longer than ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/**
 * Creates the provider EMBEDDING_PROVIDER asks for. `auto` tries transformers (EMBEDDING_MODEL
 * from EMBEDDING_MODEL_PATH, or downloaded into DATA_DIR/models) and falls back to hashing with a
 * warning naming the reason; `transformers` fails instead of falling back.
 * @throws Error when EMBEDDING_PROVIDER=transformers and the model cannot be loaded.
 */
export async function createEmbeddingProvider(config: Config, logger: Logger): Promise<EmbeddingProvider> {
  const log = logger.child({ component: 'embeddings' });
  const threshold = (name: EmbeddingProvider['name']) => config.SEARCH_TEXT_SIMILARITY_THRESHOLD ?? TEXT_THRESHOLDS[name];
  if (config.EMBEDDING_PROVIDER === 'hashing') {
    const provider = createHashingProvider(threshold('hashing'));
    log.info({ provider: 'hashing', model: formatModelVersion(provider.version) }, 'embedding provider: hashing (EMBEDDING_PROVIDER=hashing)');
    return provider;
  }
  const started = Date.now();
  try {
    // Imported here: transformers.js and ONNX Runtime load only in processes that embed.
    const { loadTransformersModel } = await import('./transformers.ts');
    const model = await withTimeout(loadTransformersModel({
      model: config.EMBEDDING_MODEL,
      modelPath: config.EMBEDDING_MODEL_PATH,
      cacheDir: path.join(config.dataDirPath, 'models'),
      dtype: config.EMBEDDING_DTYPE,
      batchSize: config.EMBEDDING_BATCH_SIZE,
    }), config.EMBEDDING_LOAD_TIMEOUT_MS, 'loading the model');
    log.info({ provider: 'transformers', model: formatModelVersion(model.version), ms: Date.now() - started }, 'embedding provider: transformers');
    return { name: 'transformers', textThreshold: threshold('transformers'), ...model };
  } catch (err) {
    const cause = (err as { cause?: { code?: string; message?: string } }).cause;
    const detail = cause?.code ?? cause?.message;
    const reason = `${config.EMBEDDING_MODEL} did not load: ${(err as Error).message}${detail ? ` (${detail})` : ''}`;
    if (config.EMBEDDING_PROVIDER === 'transformers') throw new Error(`EMBEDDING_PROVIDER=transformers: ${reason}`);
    const provider = createHashingProvider(threshold('hashing'), reason);
    log.warn({ provider: 'hashing', model: formatModelVersion(provider.version), reason }, 'embedding provider: hashing, because the transformers model did not load');
    return provider;
  }
}
