/**
 * Match score (`POST /api/v1/match-score/calculate`) and the search service's internal
 * `POST /v1/index/entries` it reads: items stored at signals, indexed by the real
 * search-index-items task (graphile-worker, hashing embeddings), scored over real HTTP.
 */
import { randomUUID } from 'node:crypto';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { discoverItems, PLACES, storeItems, waitForIndex, type DiscoverItems } from '../helpers/discover-items.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';

let platform: TestPlatform;
let key: string;
let items: DiscoverItems;

type Stored = DiscoverItems[keyof DiscoverItems];
/** The item input of the spec for a stored item. */
const input = (item: Stored, over: Record<string, unknown> = {}) => ({
  item_network: item.item_network, item_domain: item.item_domain, item_type: item.item_type, item_id: item.item_id,
  item_instance_url: 'https://example.in/items', item_schema_url: 'urn:ldp:local-discovery', item_state: item.item_state, ...over,
});
const score = (itemA: unknown, itemB: unknown) =>
  request(platform.url('signals')).post('/api/v1/match-score/calculate').set('x-api-key', key).send({ itemA, itemB });

beforeAll(async () => {
  platform = await startTestPlatform({ services: ['signals', 'search'], worker: true, env: { EMBEDDING_PROVIDER: 'hashing' } });
  key = await platform.apiKey('signals');
  items = discoverItems();
  await storeItems(platform.url('signals'), key, items);
  await waitForIndex(platform.ctx.pool, [items.electrician.item_id, items.kaithalIti.item_id, items.ambalaBusStand.item_id, items.karoraSchool.item_id, items.tailor.item_id]);
});
afterAll(() => platform.stop());

describe('match score request validation', () => {
  it.each([
    ['itemA missing', () => ({ itemB: input(items.kaithalIti) }), 'itemA'],
    ['item_id not a uuid', () => ({ itemA: input(items.electrician, { item_id: 'x' }), itemB: input(items.kaithalIti) }), 'itemA.item_id'],
    ['item_network empty', () => ({ itemA: input(items.electrician), itemB: input(items.kaithalIti, { item_network: '' }) }), 'itemB.item_network'],
    ['item_network of another network', () => ({ itemA: input(items.electrician), itemB: input(items.kaithalIti, { item_network: 'elsewhere' }) }), 'itemB.item_network'],
    ['item_domain unknown', () => ({ itemA: input(items.electrician, { item_domain: 'volunteer' }), itemB: input(items.kaithalIti) }), 'itemA.item_domain'],
    ['item_type not the domain\'s', () => ({ itemA: input(items.electrician, { item_type: 'facility' }), itemB: input(items.kaithalIti) }), 'itemA.item_type'],
    ['item_state missing', () => ({ itemA: input(items.electrician, { item_state: undefined }), itemB: input(items.kaithalIti) }), 'itemA.item_state'],
    ['item_instance_url missing', () => ({ itemA: input(items.electrician, { item_instance_url: undefined }), itemB: input(items.kaithalIti) }), 'itemA.item_instance_url'],
    ['item_latitude out of range', () => ({ itemA: input(items.electrician, { item_latitude: 95, item_longitude: 76 }), itemB: input(items.kaithalIti) }), 'itemA.item_latitude'],
    ['item_latitude without item_longitude', () => ({ itemA: input(items.electrician, { item_latitude: 29 }), itemB: input(items.kaithalIti) }), 'itemA.item_longitude'],
    ['an unknown top-level field', () => ({ itemA: input(items.electrician), itemB: input(items.kaithalIti), itemC: {} }), '(root)'],
  ])('answers 400 naming the field: %s', async (_name, body, field) => {
    const res = await request(platform.url('signals')).post('/api/v1/match-score/calculate').set('x-api-key', key).send(body());
    expect(res.status).toBe(400);
    expect(res.body).toEqual({ error: 'invalid_request', message: expect.stringContaining(`${field}:`) });
  });

  it('answers 422 for one item scored against itself, 403 where the interaction matrix relates nothing, 422 for a wrong identity', async () => {
    const same = await score(input(items.electrician), input(items.electrician));
    expect(same.status).toBe(422);
    expect(same.body.error).toBe('same_item');
    const seekers = await score(input(items.electrician), input(items.tailor));
    expect(seekers.status).toBe(403);
    expect(seekers.body).toEqual({ error: 'interaction_not_allowed', message: expect.stringContaining('seeker') });
    // itemB claims to be a seeker, but its id is indexed as a provider.
    const wrongProvider = await score(input(items.kaithalIti), { ...input(items.electrician), item_id: items.ambalaBusStand.item_id });
    expect(wrongProvider.status).toBe(422);
    expect(wrongProvider.body.error).toBe('item_mismatch');
  });
});

describe('match score', () => {
  it('scores two indexed items from their embeddings and explainable signals', async () => {
    const res = await score(input(items.electrician), input(items.kaithalIti));
    expect(res.status).toBe(200);
    const body = res.body;
    expect(Object.keys(body)).toEqual(['provider', 'score', 'band', 'confidence', 'version', 'model_provider', 'model', 'reasoning', 'signals', 'raw_response']);
    expect(body).toMatchObject({ provider: 'local', model_provider: 'local', version: 'local-1.0.0', confidence: 1 });
    expect(body.score).toBeGreaterThanOrEqual(0);
    expect(body.score).toBeLessThanOrEqual(100);
    expect(Number.isInteger(body.score)).toBe(true);
    expect(body.band).toBe(body.score >= 75 ? 'strong' : body.score >= 55 ? 'good' : body.score >= 35 ? 'fair' : 'weak');
    const { rows: [entry] } = await platform.ctx.pool.query('SELECT model_id FROM search.items WHERE item_id = $1', [items.kaithalIti.item_id]);
    expect(body.model).toBe(entry.model_id);

    const signal = (name: string) => body.signals.find((s: { name: string }) => s.name === name);
    expect(signal('semantic_similarity')).toMatchObject({ impact: expect.stringMatching(/^(positive|neutral|negative)$/) });
    expect(signal('distance')).toEqual({ name: 'distance', impact: 'neutral', summary: '21 km apart' });
    expect(signal('field:district')).toEqual({ name: 'field:district', impact: 'positive', summary: 'same District: Kaithal' });
    expect(signal('field:languages')).toMatchObject({ impact: 'positive', summary: 'Languages spoken / Languages served in common: Hindi' });
    expect(body.reasoning).toMatch(/^(Strong|Good|Fair|Weak) match, \d+ of 100\./);
    expect(body.reasoning).toContain('same District: Kaithal');
    expect(body.reasoning).toContain('21 km apart');

    const raw = body.raw_response;
    expect(raw.cosine_similarity).toBeGreaterThan(-1);
    expect(raw.distance_meters).toBeGreaterThan(20_000);
    expect(raw.fields).toEqual(expect.arrayContaining([
      { field: 'district', a: ['Kaithal'], b: ['Kaithal'], shared: ['Kaithal'], overlap: 1 },
      { field: 'languages', a: ['Hindi', 'Punjabi'], b: ['Hindi'], shared: ['Hindi'], overlap: 1 },
    ]));
    // The score is the documented weighted mean of its components.
    const c = raw.components;
    const expected = 100 * (0.5 * c.semantic.score + 0.3 * c.fields.score + 0.2 * c.distance.score);
    expect(Math.abs(body.score - expected)).toBeLessThanOrEqual(0.51);
    expect(c.distance.score).toBeCloseTo(Math.exp(-raw.distance_meters / 20_000), 3);
  });

  it('scores a nearby related facility above a distant unrelated one', async () => {
    const near = await score(input(items.electrician), input(items.kaithalIti));
    const far = await score(input(items.electrician), input(items.ambalaBusStand));
    expect(far.status).toBe(200);
    expect(far.body.score).toBeLessThan(near.body.score);
    expect(far.body.signals).toContainEqual({ name: 'field:district', impact: 'negative', summary: 'District differs: Kaithal vs Ambala' });
    expect(far.body.signals).toContainEqual({ name: 'distance', impact: 'negative', summary: expect.stringMatching(/^\d+ km apart$/) });
    expect(far.body.reasoning).toContain('Against it:');
  });

  it('uses the request\'s item_state and item_latitude/item_longitude over the indexed ones', async () => {
    const res = await score(
      input(items.electrician, { item_state: { ...items.electrician.item_state, district: 'Karnal' }, item_latitude: PLACES.karnal.lat, item_longitude: PLACES.karnal.lng }),
      input(items.kaithalIti),
    );
    expect(res.body.signals).toContainEqual({ name: 'field:district', impact: 'negative', summary: 'District differs: Karnal vs Kaithal' });
    expect(res.body.raw_response.distance_meters).toBeGreaterThan(50_000);
  });

  it('lowers confidence when signals lack data', async () => {
    const res = await score(input(items.tailor), input(items.karoraSchool));
    expect(res.status).toBe(200);
    expect(res.body.signals.map((s: { name: string }) => s.name)).not.toContain('distance');
    expect(res.body.reasoning).toContain('Distance not compared');
    expect(res.body.confidence).toBeLessThan(1);
    expect(res.body.confidence).toBeGreaterThanOrEqual(0.5);
  });

  it('gives no score, with unavailable_reason not_indexed, when an item is not indexed', async () => {
    const unknown = { ...input(items.kaithalIti), item_id: randomUUID() };
    const res = await score(input(items.electrician), unknown);
    expect(res.status).toBe(200);
    expect(res.body).toEqual({
      provider: 'local', version: 'local-1.0.0', model_provider: 'local', unavailable_reason: 'not_indexed',
      reasoning: 'No score: itemB is not indexed yet.', raw_response: { not_indexed: [{ side: 'itemB', item_id: unknown.item_id }] },
    });
    expect(res.body).not.toHaveProperty('score');
    const retired = await score(input(items.electrician), input(items.retiredSchool));
    expect(retired.body.unavailable_reason).toBe('not_indexed');
  });

  it('gives no score when the two embeddings come from different model versions', async () => {
    const other = items.karoraSchool.item_id;
    await platform.ctx.pool.query(`UPDATE search.items SET model_id = 'an-older-model' WHERE item_id = $1`, [other]);
    const res = await score(input(items.electrician), input(items.karoraSchool));
    expect(res.body).toMatchObject({ provider: 'local', unavailable_reason: 'model_mismatch', raw_response: { model_versions: { itemB: expect.stringContaining('an-older-model') } } });
    expect(res.body).not.toHaveProperty('score');
  });
});

describe('search service internal endpoint POST /v1/index/entries', () => {
  const entries = (apiKey: string, body: object) => request(platform.url('search')).post('/v1/index/entries').set('x-api-key', apiKey).send(body);

  it('gives the index entries of indexed ids in request order, to the internal key only', async () => {
    const missing = randomUUID();
    const res = await entries(platform.ctx.internalApiKey, { ids: [items.kaithalIti.item_id, missing, items.electrician.item_id] });
    expect(res.status).toBe(200);
    expect(res.body.entries.map((e: { item: { item_id: string } }) => e.item.item_id)).toEqual([items.kaithalIti.item_id, items.electrician.item_id]);
    const [iti] = res.body.entries;
    expect(iti.item).toMatchObject({ ...input(items.kaithalIti, { item_instance_url: null, item_schema_url: null }), item_locations: items.kaithalIti.item_locations, lifecycle_status: 'live', created_by: null });
    expect(iti.model).toEqual({ model_id: expect.any(String), quantization: expect.any(String), dimensions: iti.embedding.length });
    const norm = Math.sqrt(iti.embedding.reduce((s: number, x: number) => s + x * x, 0));
    expect(norm).toBeCloseTo(1, 4);

    const searchKey = await platform.apiKey('search');
    const outsider = await entries(searchKey, { ids: [items.kaithalIti.item_id] });
    expect(outsider.status).toBe(403);
    expect(outsider.body.error).toBe('internal_only');
    expect((await entries('nope', { ids: [items.kaithalIti.item_id] })).status).toBe(401);
  });

  it('answers 400 for a bad body', async () => {
    for (const body of [{}, { ids: [] }, { ids: ['x'] }, { ids: Array.from({ length: 101 }, () => randomUUID()) }, { ids: [items.kaithalIti.item_id, items.kaithalIti.item_id] }]) {
      const res = await entries(platform.ctx.internalApiKey, body);
      expect(res.status, JSON.stringify(body).slice(0, 80)).toBe(400);
      expect(res.body.error).toBe('invalid_request');
    }
  });
});

describe('match score with the search service stopped', () => {
  it('gives no score, with unavailable_reason search_unavailable', async () => {
    await platform.services.find((s) => s.name === 'search')!.close();
    const res = await score(input(items.electrician), input(items.kaithalIti));
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ provider: 'local', unavailable_reason: 'search_unavailable' });
    expect(res.body).not.toHaveProperty('score');
    expect(Object.keys(res.body).at(-1)).toBe('raw_response');
  });
});
