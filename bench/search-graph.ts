/**
 * The usearch graph alone on the vectors of the large PMGSY file (hashing, 384 d, rounded to
 * binary16 as stored): for each scalar kind (GRAPH_KINDS, default f16,bf16,i8), links per node
 * (GRAPH_CONN, default 16) and candidates kept while adding (GRAPH_ADD, default 128), the build time and CPU (2 threads), then for each number of
 * candidates kept while searching (GRAPH_SEARCH, default 400,800,1000,1600) recall@20 and the CPU
 * per query. Recall as bench/search.ts counts it, without the service: the graph's first 240
 * candidates, the first 120 of them re-ranked by their exact cosine, against brute force; 200
 * anchors (rows of the file, themselves excluded) and the 20 texts of bench/search.ts (their
 * wanted hits are the exact top 20 at or above the text threshold 0.2). The search service's
 * choice and the figures: docs/decisions.md "Search at scale".
 * Usage: node --import tsx bench/search-graph.ts (vectors cached in GRAPH_CACHE, default in the
 * temporary directory, after the first run).
 */
import os from 'node:os';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Index, exactSearch, MetricKind } from 'usearch';
import { loadNetwork } from '../lib/network/config.ts';
import { searchText } from '../lib/network/search-text.ts';
import { createItemStateValidators, itemInputProblem } from '../lib/network/items.ts';
import { hashingVector } from '../lib/search/embeddings/hashing.ts';
import { roundToHalf } from '../lib/search/half.ts';
import { facilityItems } from './pmgsy-facilities.ts';
import { TEXTS } from './search-queries.ts';

const repo = fileURLToPath(new URL('..', import.meta.url));
const DATA = path.resolve(repo, '../shared/data/pmgsy-rural-facilities/pmgsy_facilities_south_west_india.csv');
const D = 384;
const CACHE = process.env.GRAPH_CACHE ?? path.join(os.tmpdir(), 'ldp-search-graph-vectors.f32');
let matrix: Float32Array;
if (existsSync(CACHE)) { const b = readFileSync(CACHE); matrix = new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4); }
else {
  const network = await loadNetwork('local-discovery');
  const domain = network.domains.get('provider')!;
  const validators = createItemStateValidators(network);
  const rows: Float32Array[] = [];
  for await (const item of facilityItems(DATA, network, domain, (n) => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`)) {
    if (itemInputProblem(network, validators, item)) continue;
    const s = roundToHalf(hashingVector(searchText(domain, item.item_state), D));
    const norm = Math.hypot(...s) || 1;
    rows.push(s.map((x) => x / norm));
  }
  matrix = new Float32Array(rows.length * D);
  rows.forEach((r, i) => matrix.set(r, i * D));
  writeFileSync(CACHE, Buffer.from(matrix.buffer));
}
const N = matrix.length / D;
const queries: { q: Float32Array; exclude: number; text: boolean }[] = [];
for (const t of TEXTS) queries.push({ q: hashingVector(t, D), exclude: -1, text: true });
for (let i = 0; i < 200; i++) { const row = (i * 7919 + 13) % N; queries.push({ q: matrix.slice(row * D, (row + 1) * D), exclude: row, text: false }); }
const dot = (r: number, q: Float32Array) => { let s = 0; for (let d = 0, o = r * D; d < D; d++) s += matrix[o + d] * q[d]; return s; };
const truth = queries.map(({ q, exclude, text }) => {
  const { keys } = exactSearch(matrix, q, D, 60, MetricKind.Cos, 0) as { keys: BigUint64Array };
  const scores = [...keys].map(Number).filter((r) => r !== exclude).map((r) => dot(r, q)).sort((a, b) => b - a).slice(0, 20);
  return { threshold: scores[19] - 1e-5, wanted: text ? scores.filter((s) => s >= 0.2).length : 20 };
});
console.log(`${N} vectors; load ${readFileSync('/proc/loadavg', 'utf8').trim()}`);
const kinds = (process.env.GRAPH_KINDS ?? 'f16,bf16,i8').split(',');
const adds = (process.env.GRAPH_ADD ?? '128').split(',').map(Number);
const conns = (process.env.GRAPH_CONN ?? '16').split(',').map(Number);
const searches = (process.env.GRAPH_SEARCH ?? '400,800,1000,1600').split(',').map(Number);
const keys = new BigUint64Array(N); for (let i = 0; i < N; i++) keys[i] = BigInt(i + 1);
for (const conn of conns) for (const add of adds) for (const kind of kinds) {
  const index = new Index({ metric: 'cos', dimensions: D, quantization: kind, connectivity: conn, expansion_add: add, expansion_search: 64 } as never);
  const t0 = performance.now(); const c0 = process.cpuUsage();
  for (let i = 0; i < N; i += 5000) index.add(keys.subarray(i, i + 5000), matrix.subarray(i * D, Math.min(N, i + 5000) * D), 2);
  const cpuB = process.cpuUsage(c0);
  console.log(`${kind} conn ${conn} add ${add}: build ${((performance.now() - t0) / 1000).toFixed(1)} s wall, ${((cpuB.user + cpuB.system) / 1e6).toFixed(1)} s CPU; load ${readFileSync('/proc/loadavg', 'utf8').trim()}`);
  for (const es of searches) {
    // usearch keeps max(expansion_search, k) candidates: asking for es of them sets the beam.
    let hits = 0, asked = 0, thits = 0, tasked = 0;
    const c1 = process.cpuUsage();
    for (let qi = 0; qi < queries.length; qi++) {
      const { q, text } = queries[qi];
      const found = index.search(q, Math.max(es, 240), 1);
      const cands = [...found.keys].slice(0, 240).map((k) => Number(k) - 1).filter((r) => r !== queries[qi].exclude);
      // the service re-ranks the top page+100 = 120 of the (up to 240) asked by exact cosines
      const top = cands.slice(0, 120).map((r) => dot(r, q));
      const h = Math.min(truth[qi].wanted, top.filter((s) => s >= truth[qi].threshold).length);
      if (text) { thits += h; tasked += truth[qi].wanted; } else { hits += h; asked += truth[qi].wanted; }
    }
    const c = process.cpuUsage(c1);
    console.log(`  ${kind} conn ${conn} add ${add} search ${es}: recall anchors ${(hits / asked).toFixed(4)} texts ${(thits / tasked).toFixed(4)}; CPU/query ${((c.user + c.system) / 1000 / queries.length).toFixed(2)} ms (incl. rerank)`);
  }
}
