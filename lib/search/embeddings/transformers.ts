/**
 * The `transformers` embedding provider: a real sentence-embedding model run on the CPU by
 * transformers.js (@huggingface/transformers, ONNX Runtime), with mean pooling and L2
 * normalisation as for sentence-transformers models (library docs, "feature-extraction" pipeline).
 * The model runs in a worker thread (transformers-worker.js): its JavaScript tokenising never
 * holds up the event loop of the process, which keeps serving requests and writing the index.
 */
import { Worker } from 'node:worker_threads';
import type { ModelVersion } from '../../network/model-version.ts';

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

type Reply = { id: number; data: Float32Array; dims: number } | { id: number; error: string };

/**
 * Loads the model in a worker thread (from `modelPath` only, or the cache, or the model hub once)
 * and probes it for its dimension count.
 * @throws Error from transformers.js when the files cannot be found, fetched or run (its `cause`
 * carries the underlying code, e.g. ENOTFOUND).
 */
export async function loadTransformersModel(options: TransformersOptions): Promise<TransformersModel> {
  const worker = new Worker(new URL('./transformers-worker.js', import.meta.url), {
    workerData: { model: options.model, modelPath: options.modelPath, cacheDir: options.cacheDir, dtype: options.dtype },
  });
  const pending = new Map<number, { resolve: (reply: Reply) => void; reject: (err: Error) => void }>();
  let nextId = 0;
  let broken: Error | undefined;
  const fail = (err: Error) => {
    broken ??= err;
    for (const p of pending.values()) p.reject(err);
    pending.clear();
  };
  await new Promise<void>((resolve, reject) => {
    worker.once('message', (m: { type: string; message?: string; cause?: string }) => {
      if (m.type === 'ready') resolve();
      else reject(Object.assign(new Error(m.message), { cause: m.cause ? { code: m.cause } : undefined }));
    });
    worker.once('error', reject);
  }).catch(async (err) => {
    await worker.terminate();
    throw err;
  });
  // The thread keeps the process alive only while a request is pending.
  worker.unref();
  worker.on('message', (reply: Reply) => {
    const p = pending.get(reply.id);
    pending.delete(reply.id);
    if (pending.size === 0) worker.unref();
    p?.resolve(reply);
  });
  worker.on('error', fail);
  worker.on('exit', (code) => fail(new Error(`the embedding worker thread exited (code ${code})`)));

  const run = (texts: string[]): Promise<Float32Array[]> => new Promise<Reply>((resolve, reject) => {
    if (broken) return reject(broken);
    const id = nextId++;
    if (pending.size === 0) worker.ref();
    pending.set(id, { resolve, reject });
    worker.postMessage({ id, texts });
  }).then((reply) => {
    if ('error' in reply) throw new Error(`embedding failed: ${reply.error}`);
    return Array.from({ length: texts.length }, (_, i) => reply.data.subarray(i * reply.dims, (i + 1) * reply.dims));
  });

  const [probe] = await run(['dimension probe']);
  return {
    version: { model_id: options.model, quantization: options.dtype, dimensions: probe.length },
    async embed(texts) {
      // All batches are queued at once; the worker answers them in order.
      const batches: Promise<Float32Array[]>[] = [];
      for (let i = 0; i < texts.length; i += options.batchSize) batches.push(run(texts.slice(i, i + options.batchSize)));
      return (await Promise.all(batches)).flat();
    },
    async dispose() {
      broken ??= new Error('the embedding model was disposed');
      await worker.terminate();
    },
  };
}
