// The usearch graph of the in-process vector index, in a worker thread (usearch-index.ts starts it
// and sends it every graph operation). A native Index belongs to the thread that made it, so the
// graph lives here, and its searches (~1.5–2 ms each on the full file) run on another core while
// the main thread serves requests. Plain JavaScript importing only usearch: a thread with the
// TypeScript loader would cost ~40 MB more for nothing.
//
// Requests {id, op, ...} are answered in the order they came, one at a time, with {id, size (the
// graph's vectors), ...} or {id, error}.
import { parentPort } from 'node:worker_threads';
import { Index } from 'usearch';

/** The one graph of this thread; `create` and `load` replace it. */
let graph;

const ops = {
  create({ options }) {
    graph = undefined; // the old graph can be collected before the new one grows
    graph = new Index(options);
  },
  load({ options, file }) {
    graph = undefined;
    const loaded = new Index(options);
    loaded.load(file);
    graph = loaded;
    return { dimensions: Number(graph.dimensions()) };
  },
  drop() {
    graph = undefined;
  },
  // A build step: keys (BigUint64Array) and their vectors (Float32Array, concatenated) added with
  // `threads`, 500 at a time as the build always did (the same concurrent insertions).
  add({ keys, vectors, threads }) {
    const width = vectors.length / keys.length;
    for (let i = 0; i < keys.length; i += 500) {
      graph.add(keys.subarray(i, i + 500), vectors.subarray(i * width, Math.min(keys.length, i + 500) * width), threads);
    }
  },
  // Adds or replaces vectors (the catch-up; keys distinct, as search.items' ann_key): the replaced
  // ones are removed, then all are added in one call with `threads` — a bulk upload's new vectors
  // enter at ~1,900 a second on 2 cores instead of ~700-900 one by one (measured on the full file) —
  // or, without `parallel`, one by one on this thread alone (a call adds on min(threads, vectors)
  // threads; `threads` stays the same in every call, since a call that grows the index reserves
  // that many threads' state for every later one).
  put({ keys, vectors, threads, parallel }) {
    for (const key of keys) if (graph.contains(key)) graph.remove(key);
    if (parallel) return void graph.add(keys, vectors, threads);
    const width = vectors.length / keys.length;
    for (let i = 0; i < keys.length; i++) graph.add(keys.subarray(i, i + 1), vectors.subarray(i * width, (i + 1) * width), threads);
  },
  remove({ keys }) {
    for (const key of keys) if (graph.contains(key)) graph.remove(key);
  },
  size() {},
  save({ file }) {
    graph.save(file);
  },
  // Up to `k` nearest keys (BigUint64Array) with their distances (Float32Array, ascending), transferred.
  search({ vector, k }) {
    const { keys, distances } = graph.search(vector, k, 1);
    return [{ keys, distances }, [keys.buffer, distances.buffer]];
  },
};

parentPort.on('message', ({ id, op, ...args }) => {
  try {
    if (!graph && !['create', 'load', 'drop', 'size'].includes(op)) throw new Error('the thread holds no graph');
    const out = ops[op](args);
    const [reply, transfer] = Array.isArray(out) ? out : [out, []];
    parentPort.postMessage({ id, ...reply, size: graph ? Number(graph.size()) : 0 }, transfer);
  } catch (err) {
    parentPort.postMessage({ id, error: err?.message ?? String(err) });
  }
});
