// The transformers.js model, run in a worker thread (lib/embeddings/transformers.ts starts it).
// Tokenising and pooling are JavaScript: here they use a core of their own instead of the event
// loop of a process that also serves HTTP and drives the database writes of the indexing.
// Plain JavaScript, so that it loads in a worker thread without the TypeScript loader.
import { parentPort, workerData } from 'node:worker_threads';
import path from 'node:path';
import { env, pipeline } from '@huggingface/transformers';

const { model, modelPath, cacheDir, dtype } = workerData;
// env is transformers.js's configuration, global to this thread only.
if (modelPath) {
  env.localModelPath = path.resolve(modelPath) + path.sep;
  env.allowLocalModels = true;
  env.allowRemoteModels = false;
} else {
  env.allowLocalModels = false;
  env.allowRemoteModels = true;
  env.cacheDir = cacheDir;
}

let extractor;
try {
  extractor = await pipeline('feature-extraction', model, {
    dtype,
    // ONNX Runtime's thread pool busy-waits between operations by default, holding every core even
    // when the model is idle or small; the worker shares its machine with PostgreSQL and the other
    // jobs. Sleeping instead keeps the parallelism (measured with the tiny offline model: the same
    // throughput with half the CPU). ONNX Runtime session config `session.*.allow_spinning`.
    session_options: { extra: { session: { intra_op: { allow_spinning: '0' }, inter_op: { allow_spinning: '0' } } } },
  });
  parentPort.postMessage({ type: 'ready' });
} catch (err) {
  parentPort.postMessage({ type: 'failed', message: err.message, cause: err.cause?.code ?? err.cause?.message });
}

// {id, texts} → {id, data (Float32Array of rows × dims, transferred), dims} or {id, error};
// one request at a time, in the order they came.
let queue = Promise.resolve();
parentPort.on('message', ({ id, texts }) => {
  queue = queue.then(async () => {
    try {
      const output = await extractor(texts, { pooling: 'mean', normalize: true });
      const whole = output.data instanceof Float32Array && output.data.byteOffset === 0 && output.data.byteLength === output.data.buffer.byteLength;
      const data = whole ? output.data : Float32Array.from(output.data);
      parentPort.postMessage({ id, data, dims: output.dims[1] }, [data.buffer]);
    } catch (err) {
      parentPort.postMessage({ id, error: err.message });
    }
  });
});
