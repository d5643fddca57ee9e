/**
 * Embedding providers: the built-in hashing provider's behaviour, the start-up choice (transformers
 * when the model loads, else hashing, said in the log and in /ready), and the real transformers.js
 * loading path, offline, with the tiny model in ../shared/models.
 */
import { rm } from 'node:fs/promises';
import path from 'node:path';
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../lib/platform/config.ts';
import { cosineSimilarity, createEmbeddingProvider, createHashingProvider } from '../../lib/search/embeddings/index.ts';
import { hashingVector } from '../../lib/search/embeddings/hashing.ts';
import { startTestPlatform, tempDir, type TestPlatform } from '../helpers/platform.ts';
import { absent, NEEDS_SHARED, titled } from '../helpers/requires.ts';

const repoRoot = fileURLToPath(new URL('../..', import.meta.url));
/** ../shared/models (outside the repository): the tiny offline test model. */
const MODELS = path.resolve(repoRoot, '../shared/models');
const TINY = 'minishlab/m2v-test-vq128';
const norm = (v: ArrayLike<number>) => Math.hypot(...Array.from(v));

/** A logger writing JSON lines into `lines`. */
function capturingLogger(lines: Record<string, unknown>[]) {
  return pino({ level: 'info' }, new Writable({
    write(chunk, _enc, done) {
      lines.push(JSON.parse(String(chunk)));
      done();
    },
  }));
}

describe('hashing provider', () => {
  const provider = createHashingProvider();

  it('is deterministic and returns unit vectors of its dimension count', async () => {
    const texts = ['Name: Veterinary Hospital Karora\nCategory: Medical', 'bus stand', ''];
    const [a, b, empty] = await provider.embed(texts);
    const again = await createHashingProvider().embed(texts);
    expect(Array.from(again[0])).toEqual(Array.from(a));
    expect(Array.from(again[1])).toEqual(Array.from(b));
    for (const v of [a, b, empty]) {
      expect(v).toHaveLength(provider.version.dimensions);
      expect(norm(v)).toBeCloseTo(1, 6);
    }
    expect(provider.version).toEqual({ model_id: 'ldp-hashing-ngram-v1', quantization: 'none', dimensions: 384 });
  });

  it('tolerates misspellings: "veternary" is close to "veterinary" and far from unrelated words', () => {
    const v = (t: string) => hashingVector(t, 384);
    const misspelt = cosineSimilarity(v('veternary'), v('veterinary'));
    expect(misspelt).toBeGreaterThan(0.4);
    expect(misspelt).toBeGreaterThan(cosineSimilarity(v('veternary'), v('secondary')) + 0.3);
    expect(cosineSimilarity(v('veternary hospital'), v('Name: Veterinary Hospital Karora'))).toBeGreaterThan(
      cosineSimilarity(v('veternary hospital'), v('Name: Bus Stand Karora')) + 0.2);
  });

  it('ignores case, accents and punctuation', () => {
    expect(Array.from(hashingVector('Café, PHC!', 64))).toEqual(Array.from(hashingVector('cafe phc', 64)));
  });
});

describe('choosing the provider at start-up', () => {
  it('uses hashing when asked, and when the transformers model does not load says why in the log', async () => {
    const dir = await tempDir();
    const lines: Record<string, unknown>[] = [];
    const hashing = await createEmbeddingProvider(loadConfig({ DATA_DIR: dir, EMBEDDING_PROVIDER: 'hashing' }), capturingLogger(lines));
    expect(hashing).toMatchObject({ name: 'hashing', fallbackReason: undefined });

    const auto = await createEmbeddingProvider(loadConfig({ DATA_DIR: dir, EMBEDDING_MODEL_PATH: dir }), capturingLogger(lines));
    expect(auto.name).toBe('hashing');
    expect(auto.fallbackReason).toMatch(/^Xenova\/all-MiniLM-L6-v2 did not load: /);
    expect(lines.at(-1)).toMatchObject({ level: 40, provider: 'hashing', reason: auto.fallbackReason,
      msg: 'embedding provider: hashing, because the transformers model did not load' });

    await expect(createEmbeddingProvider(loadConfig({ DATA_DIR: dir, EMBEDDING_MODEL_PATH: dir, EMBEDDING_PROVIDER: 'transformers' }), capturingLogger(lines)))
      .rejects.toThrow(/EMBEDDING_PROVIDER=transformers: Xenova\/all-MiniLM-L6-v2 did not load/);
    await rm(dir, { recursive: true, force: true });
  });

  it('reports the fallback and its reason in the search service\'s /ready', async () => {
    const platform = await startTestPlatform({ services: ['search'], env: { EMBEDDING_PROVIDER: 'auto', EMBEDDING_MODEL_PATH: '/nonexistent-models' } });
    try {
      const res = await request(platform.url('search')).get('/ready');
      expect(res.body.checks.embeddings).toEqual({
        ok: true, provider: 'hashing', model_id: 'ldp-hashing-ngram-v1', quantization: 'none', dimensions: 384,
        reason: expect.stringMatching(/^Xenova\/all-MiniLM-L6-v2 did not load: /),
      });
      expect(res.body.checks.vector_backend).toMatchObject({ ok: true, backend: 'usearch' });
    } finally {
      await platform.stop();
    }
  });
});

// The tiny model lives outside the repository (../shared/models); without it there is nothing to load.
const noModel = absent([path.join(MODELS, TINY, 'onnx', 'model.onnx')], NEEDS_SHARED);
describe.skipIf(noModel !== '')(titled('transformers provider (tiny offline model)', noModel), () => {
  const config = (env: Record<string, string> = {}) => loadConfig({
    DATA_DIR: '/tmp/ldp-unused', EMBEDDING_PROVIDER: 'transformers', EMBEDDING_MODEL: TINY, EMBEDDING_MODEL_PATH: MODELS, ...env,
  });

  it('loads offline from EMBEDDING_MODEL_PATH and returns unit vectors, the same in any batch size', async () => {
    const lines: Record<string, unknown>[] = [];
    const provider = await createEmbeddingProvider(config({ EMBEDDING_BATCH_SIZE: '2' }), capturingLogger(lines));
    try {
      expect(provider).toMatchObject({ name: 'transformers', version: { model_id: TINY, quantization: 'fp32', dimensions: 64 } });
      expect(lines.at(-1)).toMatchObject({ provider: 'transformers', msg: 'embedding provider: transformers' });
      const texts = ['veterinary hospital', 'Name: Govt High School\nCategory: Education', 'bus stand', 'phc', 'gram panchayat office'];
      const batched = await provider.embed(texts);
      expect(batched).toHaveLength(5);
      for (const v of batched) {
        expect(v).toHaveLength(64);
        expect(norm(v)).toBeCloseTo(1, 5);
      }
      const one = await provider.embed([texts[3]]);
      for (let i = 0; i < 64; i++) expect(one[0][i]).toBeCloseTo(batched[3][i], 5);
      expect(cosineSimilarity(batched[0], batched[2])).toBeLessThan(0.9999);
    } finally {
      await provider.dispose();
    }
  });

  it('records the quantised weights as the model version', async () => {
    const provider = await createEmbeddingProvider(config({ EMBEDDING_DTYPE: 'q8' }), capturingLogger([]));
    try {
      expect(provider.version).toEqual({ model_id: TINY, quantization: 'q8', dimensions: 64 });
      expect(norm((await provider.embed(['school']))[0])).toBeCloseTo(1, 5);
    } finally {
      await provider.dispose();
    }
  });

  describe('indexing and search with it', () => {
    let platform: TestPlatform;
    beforeAll(async () => {
      platform = await startTestPlatform({
        services: ['signals', 'search'], worker: true, env: { EMBEDDING_PROVIDER: 'auto', EMBEDDING_MODEL: TINY, EMBEDDING_MODEL_PATH: MODELS },
      });
    });
    afterAll(() => platform.stop());

    it('indexes with the model, reports it in /ready, and answers searches', async () => {
      const ready = await request(platform.url('search')).get('/ready');
      expect(ready.body.checks.embeddings).toEqual({ ok: true, provider: 'transformers', model_id: TINY, quantization: 'fp32', dimensions: 64 });
      const key = await platform.apiKey('signals');
      const id = '0d5b8a4e-0d3a-4c39-9a55-0a7b3c1e2f10';
      const stored = await request(platform.url('signals')).put(`/api/v1/items/${id}`).set('x-api-key', key).send({
        item_network: 'local-discovery', item_domain: 'provider', item_type: 'facility', item_id: id,
        item_state: { name: 'Veterinary Hospital', category: 'Medical', district: 'Kaithal', state: 'Haryana', latitude: 29.65, longitude: 76.54 },
        item_locations: [{ lat: 29.65, lng: 76.54 }],
      });
      expect(stored.status).toBe(201);
      const deadline = Date.now() + 20_000;
      let row;
      while (!(row = (await platform.ctx.pool.query('SELECT model_id, model_dimensions FROM search.items WHERE item_id = $1', [id])).rows[0])) {
        if (Date.now() > deadline) throw new Error('not indexed');
        await new Promise((r) => setTimeout(r, 100));
      }
      expect(row).toEqual({ model_id: TINY, model_dimensions: 64 });
      const res = await request(platform.url('search')).post('/v1/search').set('x-api-key', await platform.apiKey('search')).send({
        context: { messageId: 'm1', networkId: 'local-discovery', domain: 'provider', itemType: 'facility' },
        message: { intent: { textSearch: 'veterinary hospital' } },
      });
      expect(res.status).toBe(200);
      expect(res.body.message.items.map((i: { item_id: string }) => i.item_id)).toEqual([id]);
      expect(res.body.message.items[0].score).toBeGreaterThan(0.5);
    });
  });
});
