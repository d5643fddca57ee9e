/**
 * `POST /v1/search`, `POST /v1/search/flat` and `POST /v1/relevance` over items stored at signals
 * and indexed by the real search-index-items task (hashing embeddings, exact vector backend).
 */
import { randomUUID } from 'node:crypto';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { cosineSimilarity } from '../../lib/search/embeddings/index.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';

let platform: TestPlatform;
let searchKey: string;

const PLACES = {
  karora: { lat: 29.6574, lng: 76.5421 },
  rajound: { lat: 29.7402, lng: 76.448 },
  kaithal: { lat: 29.8015, lng: 76.3998 },
  pundri: { lat: 29.7608, lng: 76.5619 },
  karnal: { lat: 29.6857, lng: 76.9905 },
  ambala: { lat: 30.3782, lng: 76.7767 },
  delhi: { lat: 28.6139, lng: 77.209 },
};
type Place = keyof typeof PLACES;

const provider = (name: string, category: string, at: Place[], extra: Record<string, unknown> = {}) => ({
  item_network: 'local-discovery', item_domain: 'provider', item_type: 'facility', item_id: randomUUID(),
  item_state: { name, category, district: 'Kaithal', state: 'Haryana', latitude: PLACES[at[0]].lat, longitude: PLACES[at[0]].lng, ...extra },
  item_locations: at.map((p) => PLACES[p]),
});
const seeker = (skills: string[], at: Place) => ({
  item_network: 'local-discovery', item_domain: 'seeker', item_type: 'seeker_profile', item_id: randomUUID(),
  item_state: { skills, district: 'Kaithal', state: 'Haryana', latitude: PLACES[at].lat, longitude: PLACES[at].lng },
  item_locations: [PLACES[at]],
});

/** Stored one request each, in this order (newest order is the reverse). */
const items = {
  vetKarora: provider('Veterinary Hospital Karora', 'Medical', ['karora'], { services: ['vaccination', 'surgery'], capacity: 20, external_id: '733237' }),
  vetPundri: provider('Govt Veterinary Dispensary Pundri', 'Medical', ['pundri'], { capacity: 10 }),
  phcRajound: provider('Primary Health Centre Rajound', 'Medical', ['rajound'], { services: ['maternal care'], capacity: 30 }),
  schoolKaithal: provider('Govt Senior Secondary School Kaithal', 'Education', ['kaithal'], { services: ['computer lab', 'library'], capacity: 800 }),
  itiKaithal: provider('Industrial Training Institute Kaithal', 'Education', ['kaithal'], { services: ['electrician training', 'welding'], capacity: 300 }),
  busAmbala: provider('Bus Stand Ambala', 'Transport/Admin', ['ambala'], { district: 'Ambala' }),
  hospitalKarnal: provider('Civil Hospital Karnal', 'Medical', ['karnal'], { services: ['emergency', 'surgery'], capacity: 200, district: 'Karnal' }),
  // Two locations: an office in Delhi and a camp near Karora.
  mobileVet: provider('Mobile Veterinary Clinic', 'Medical', ['delhi', 'karora'], { services: ['vaccination'] }),
  // No coordinates: stays draft.
  draftVet: { ...provider('Veterinary Camp Karora', 'Medical', ['karora']), item_state: { name: 'Veterinary Camp Karora', category: 'Medical', district: 'Kaithal', state: 'Haryana' }, item_locations: [] },
  electrician: seeker(['electrician', 'wiring'], 'karora'),
  welder: seeker(['welding'], 'kaithal'),
};
type Name = keyof typeof items;
/** 40 more live providers, stored in one batch, for deep pages. */
const anganwadis = Array.from({ length: 40 }, (_, i) => provider(`Anganwadi Centre ${i + 1}`, 'Education', [i % 2 ? 'pundri' : 'rajound'], { capacity: i }));
const LIVE_PROVIDERS: Name[] = ['vetKarora', 'vetPundri', 'phcRajound', 'schoolKaithal', 'itiKaithal', 'busAmbala', 'hospitalKarnal', 'mobileVet'];

const context = (over: Record<string, unknown> = {}) => ({ messageId: randomUUID(), networkId: 'local-discovery', domain: 'provider', itemType: 'facility', ...over });
const search = (intent: Record<string, unknown>, pagination?: Record<string, unknown>, ctx: Record<string, unknown> = {}) =>
  request(platform.url('search')).post('/v1/search').set('x-api-key', searchKey)
    .send({ context: context(ctx), message: { intent, ...(pagination ? { pagination } : {}) } });
const ids = (res: { body: { message: { items: { item_id: string }[] } } }) => res.body.message.items.map((i) => i.item_id);
const idsOf = (...names: Name[]) => names.map((n) => items[n].item_id);
const nameOf = (id: string) => (Object.keys(items) as Name[]).find((n) => items[n].item_id === id) ?? id;
const names = (res: Parameters<typeof ids>[0]) => ids(res).map(nameOf);
const sorted = (a: string[]) => [...a].sort();

function distance(a: { lat: number; lng: number }, b: { lat: number; lng: number }): number {
  const rad = (d: number) => (d * Math.PI) / 180;
  const h = Math.sin(rad(b.lat - a.lat) / 2) ** 2 + Math.cos(rad(a.lat)) * Math.cos(rad(b.lat)) * Math.sin(rad(b.lng - a.lng) / 2) ** 2;
  return 2 * 6371008.8 * Math.asin(Math.min(1, Math.sqrt(h)));
}
const nearest = (name: Name, from: { lat: number; lng: number }) => Math.min(...items[name].item_locations.map((l) => distance(from, l)));
const point = (p: { lat: number; lng: number }) => ({ type: 'Point', coordinates: [p.lng, p.lat] });

async function embedding(id: string): Promise<number[]> {
  const { rows } = await platform.ctx.pool.query('SELECT search.embedding_array(embedding) AS embedding FROM search.items WHERE item_id = $1', [id]);
  return rows[0].embedding;
}

beforeAll(async () => {
  platform = await startTestPlatform({
    services: ['signals', 'search'], worker: true, env: { EMBEDDING_PROVIDER: 'hashing', SEARCH_TEXT_SIMILARITY_THRESHOLD: '0.2' },
  });
  const signalsKey = await platform.apiKey('signals');
  searchKey = await platform.apiKey('search');
  for (const item of Object.values(items)) {
    const res = await request(platform.url('signals')).put(`/api/v1/items/${item.item_id}`).set('x-api-key', signalsKey).send(item);
    expect(res.status, JSON.stringify(res.body)).toBe(201);
  }
  const batch = await request(platform.url('signals')).post('/api/v1/items/batch').set('x-api-key', signalsKey).send({ items: anganwadis });
  expect(batch.body.summary.created).toBe(anganwadis.length);
  const expected = Object.keys(items).length + anganwadis.length;
  const deadline = Date.now() + 30_000;
  while ((await platform.ctx.pool.query('SELECT count(*)::int AS n FROM search.items')).rows[0].n < expected) {
    if (Date.now() > deadline) throw new Error('items were not indexed in time');
    await new Promise((r) => setTimeout(r, 100));
  }
});
afterAll(() => platform.stop());

describe('POST /v1/search: envelope, scope and errors', () => {
  it('returns live items of the context newest first, echoes the context with version 1.0.0, and counts exactly', async () => {
    const ctx = context({ timestamp: '2026-01-01T00:00:00Z', bapId: 'example-bap' });
    const res = await request(platform.url('search')).post('/v1/search').set('x-api-key', searchKey).send({ context: ctx, message: { intent: {} } });
    expect(res.status).toBe(200);
    expect(res.body.context).toEqual({ ...ctx, version: '1.0.0' });
    expect(res.body.message.meta).toEqual({ total: LIVE_PROVIDERS.length + anganwadis.length, limit: 20, offset: 0, sort_applied: 'newest' });
    expect(ids(res).slice(0, 20)).toHaveLength(20);
    const all = await search({}, { limit: 100 });
    expect(sorted(ids(all))).toEqual(sorted([...idsOf(...LIVE_PROVIDERS), ...anganwadis.map((a) => a.item_id)]));
    // Stored one by one: newest first, ties (one batch) by item id descending.
    const singles = ids(all).filter((id) => LIVE_PROVIDERS.includes(nameOf(id) as Name));
    expect(singles).toEqual(idsOf(...LIVE_PROVIDERS).reverse());
    const first = all.body.message.items.find((i: { item_id: string }) => i.item_id === items.mobileVet.item_id);
    expect(first).toEqual({
      item_network: 'local-discovery', item_domain: 'provider', item_type: 'facility', item_id: items.mobileVet.item_id,
      item_state: items.mobileVet.item_state, item_locations: items.mobileVet.item_locations, item_instance_url: null, item_schema_url: null,
      created_by: null, created_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/), updated_at: expect.any(String), lifecycle_status: 'live',
    });
    const versioned = await search({}, undefined, { version: '1.1.0' });
    expect(versioned.body.context.version).toBe('1.1.0');
  });

  it('answers 400 invalid_request in shape A naming each bad field', async () => {
    const missing = await request(platform.url('search')).post('/v1/search').set('x-api-key', searchKey)
      .send({ context: { networkId: 'local-discovery', domain: 'provider', itemType: 'facility' }, message: { intent: {} } });
    expect(missing.status).toBe(400);
    expect(missing.body).toEqual({ error: 'invalid_request', message: expect.stringContaining('context.messageId') });
    for (const [ctx, field] of [
      [{ networkId: 'other-network' }, 'context.networkId'], [{ domain: 'vendor' }, 'context.domain'], [{ itemType: 'seeker_profile' }, 'context.itemType'],
    ] as const) {
      const res = await search({}, undefined, ctx);
      expect(res.status).toBe(400);
      expect(res.body.error).toBe('invalid_request');
      expect(res.body.message).toContain(field);
    }
    const unknownKey = await search({ textSerch: 'school' });
    expect(unknownKey.status).toBe(400);
    expect(unknownKey.body.message).toMatch(/textSerch/);
    const badSort = await search({ sort: 'distance' });
    expect(badSort.status).toBe(400);
    expect(badSort.body.message).toContain('message.intent.sort');
  });

  it('requires an API key of the search service (401 in shape A)', async () => {
    const res = await request(platform.url('search')).post('/v1/search').send({ context: context(), message: { intent: {} } });
    expect(res.status).toBe(401);
    expect(res.body).toEqual({ error: 'missing_api_key', message: expect.any(String) });
  });

  it('limits pagination to 1..100 (default 20) and answers an offset past the end with no items and the exact total', async () => {
    for (const limit of [0, 101, 2.5]) expect((await search({}, { limit })).status).toBe(400);
    expect((await search({}, { offset: -1 })).status).toBe(400);
    const past = await search({}, { offset: 1000 });
    expect(past.status).toBe(200);
    expect(past.body.message.items).toEqual([]);
    expect(past.body.message.meta).toEqual({ total: 48, limit: 20, offset: 1000, sort_applied: 'newest' });
  });

  it('reports the embedding provider and vector backend in /ready', async () => {
    const res = await request(platform.url('search')).get('/ready');
    expect(res.body.checks.embeddings).toEqual({ ok: true, provider: 'hashing', model_id: 'ldp-hashing-ngram-v1', quantization: 'none', dimensions: 384 });
    expect(res.body.checks.vector_backend).toMatchObject({ ok: true, backend: inject('vectorBackend') });
    expect(['loading', 'building', 'ready']).toContain(res.body.checks.vector_backend.state);
  });
});

describe('POST /v1/search: text', () => {
  it('finds facilities by misspelt text, ranked by cosine similarity, and narrows the rest away', async () => {
    const res = await search({ textSearch: 'veternary' });
    expect(res.status).toBe(200);
    expect(res.body.message.meta.sort_applied).toBe('relevance');
    expect(sorted(names(res).slice(0, 3))).toEqual(['mobileVet', 'vetKarora', 'vetPundri']);
    expect(names(res)).not.toContain('busAmbala');
    expect(names(res)).not.toContain('draftVet');
    expect(res.body.message.meta.total).toBe(res.body.message.items.length);
    const scores = res.body.message.items.map((i: { score: number }) => i.score);
    expect(scores).toEqual([...scores].sort((a, b) => b - a));
    // score is the cosine similarity of the item's embedding to the text's.
    const { hashingVector } = await import('../../lib/search/embeddings/hashing.ts');
    const top = res.body.message.items[0];
    expect(top.score).toBeCloseTo(cosineSimilarity(hashingVector('veternary', 384), await embedding(top.item_id)), 5);
  });

  it('lets an item qualify when every word occurs in its text, whatever its similarity', async () => {
    const res = await search({ textSearch: 'Kaithal school' });
    expect(names(res)[0]).toBe('schoolKaithal');
    // "Kaithal" is the district of all live providers but the Ambala bus stand and the Karnal hospital.
    const withWord = await search({ textSearch: 'Kaithal' }, { limit: 100 });
    expect(withWord.body.message.meta.total).toBe(46);
    const below = withWord.body.message.items.filter((i: { score: number }) => i.score < platform.config.SEARCH_TEXT_SIMILARITY_THRESHOLD!);
    expect(below.length).toBeGreaterThan(0);
  });

  it('keeps the text narrowing under another order, with scores', async () => {
    const relevance = await search({ textSearch: 'veternary' });
    const newest = await search({ textSearch: 'veternary', sort: 'newest' });
    expect(newest.body.message.meta).toMatchObject({ sort_applied: 'newest', total: relevance.body.message.meta.total });
    expect(sorted(ids(newest))).toEqual(sorted(ids(relevance)));
    expect(newest.body.message.items.every((i: { score?: number }) => typeof i.score === 'number')).toBe(true);
  });

  it('treats a text without words as no text', async () => {
    const res = await search({ textSearch: '  ?! ' });
    expect(res.body.message.meta).toMatchObject({ total: 48, sort_applied: 'newest' });
  });
});

describe('POST /v1/search: filters', () => {
  const filtered = async (...filters: { op: string; target: string; value: unknown }[]) => {
    const res = await search({ filters }, { limit: 100 });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    return sorted(names(res).filter((n) => !n.match(/^[0-9a-f-]{36}$/)));
  };
  const medical = ['hospitalKarnal', 'mobileVet', 'phcRajound', 'vetKarora', 'vetPundri'];

  it('applies every operator on item_state fields', async () => {
    expect(await filtered({ op: 'eq', target: 'item_state.category', value: 'Medical' })).toEqual(medical);
    expect(await filtered({ op: 'neq', target: 'item_state.category', value: 'Education' })).toEqual(sorted([...medical, 'busAmbala']));
    expect(await filtered({ op: 'in', target: 'item_state.category', value: ['Transport/Admin', 'Medical'] })).toEqual(sorted([...medical, 'busAmbala']));
    expect(await filtered({ op: 'contains', target: 'item_state.services', value: 'surgery' })).toEqual(['hospitalKarnal', 'vetKarora']);
    expect(await filtered({ op: 'contains', target: 'item_state.services', value: ['surgery', 'vaccination'] })).toEqual(['vetKarora']);
    expect(await filtered({ op: 'contains', target: 'item_state.name', value: 'HOSPITAL' })).toEqual(['hospitalKarnal', 'vetKarora']);
    expect(await filtered({ op: 'contains_any', target: 'item_state.services', value: ['welding', 'library'] })).toEqual(['itiKaithal', 'schoolKaithal']);
    expect(await filtered({ op: 'contains_any', target: 'item_state.name', value: ['civil', 'mobile'] })).toEqual(['hospitalKarnal', 'mobileVet']);
    expect(await filtered({ op: 'gt', target: 'item_state.capacity', value: 200 })).toEqual(['itiKaithal', 'schoolKaithal']);
    expect(await filtered({ op: 'gte', target: 'item_state.capacity', value: 200 })).toEqual(['hospitalKarnal', 'itiKaithal', 'schoolKaithal']);
    expect(await filtered({ op: 'lt', target: 'item_state.capacity', value: 20 }, { op: 'neq', target: 'item_state.category', value: 'Education' })).toEqual(['vetPundri']);
    expect(await filtered({ op: 'lte', target: 'item_state.capacity', value: 20 }, { op: 'eq', target: 'item_state.category', value: 'Medical' })).toEqual(['vetKarora', 'vetPundri']);
    expect(await filtered({ op: 'gte', target: 'item_state.district', value: 'Karnal' })).toEqual(['hospitalKarnal']);
    expect(await filtered({ op: 'lte', target: 'item_state.latitude', value: 29.7 }, { op: 'gte', target: 'item_state.longitude', value: 76.5 })).toEqual(['hospitalKarnal', 'mobileVet', 'vetKarora']);
  });

  it('ANDs filters and counts the matches exactly', async () => {
    const res = await search({ filters: [{ op: 'eq', target: 'item_state.category', value: 'Education' }, { op: 'lt', target: 'item_state.capacity', value: 10 }] });
    expect(res.body.message.meta.total).toBe(10); // anganwadi centres 1..10 (capacity 0..9)
  });

  it('rejects unknown operators and targets, private fields and values of the wrong kind with 400', async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ op: 'like', target: 'item_state.name', value: 'x' }, 'message.intent.filters.0.op'],
      [{ op: 'eq', target: 'item_state.colour', value: 'x' }, 'unknown target "item_state.colour"'],
      [{ op: 'eq', target: 'name', value: 'x' }, 'unknown target "name"'],
      [{ op: 'eq', target: 'item_state.phone', value: '+919876543210' }, 'unknown target "item_state.phone"'],
      [{ op: 'gt', target: 'item_state.capacity', value: 'ten' }, 'gt on capacity needs a number'],
      [{ op: 'in', target: 'item_state.category', value: 'Medical' }, 'in on category needs a list'],
      [{ op: 'eq', target: 'item_state.category', value: 'Medicla' }, 'category is one of'],
      [{ op: 'contains', target: 'item_state.capacity', value: 1 }, 'contains applies to text and list fields'],
      [{ op: 'eq', target: 'item_state.name' }, 'message.intent.filters.0.value'],
    ];
    for (const [filter, text] of cases) {
      const res = await search({ filters: [filter] });
      expect(res.status, JSON.stringify(filter)).toBe(400);
      expect(res.body.error).toBe('invalid_request');
      expect(res.body.message).toContain(text);
    }
  });
});

describe('POST /v1/search: places and orders', () => {
  it('filters by s_dwithin (any location within range), orders nearest and reports the distance to the nearest location', async () => {
    const res = await search({ spatial: [{ op: 's_dwithin', geometry: point(PLACES.karora), distanceMeters: 15_000 }] }, { limit: 100 });
    expect(res.status).toBe(200);
    expect(res.body.message.meta.sort_applied).toBe('nearest');
    const within = LIVE_PROVIDERS.filter((n) => nearest(n, PLACES.karora) <= 15_000);
    expect(within).toContain('mobileVet'); // by its second location
    expect(within).not.toContain('itiKaithal');
    const found = res.body.message.items.filter((i: { item_id: string }) => LIVE_PROVIDERS.includes(nameOf(i.item_id) as Name));
    expect(sorted(found.map((i: { item_id: string }) => nameOf(i.item_id)))).toEqual(sorted(within));
    for (const item of res.body.message.items) expect(item.distanceMeters).toBeLessThanOrEqual(15_000);
    for (const item of found) expect(item.distanceMeters).toBeCloseTo(nearest(nameOf(item.item_id) as Name, PLACES.karora), 3);
    const distances = res.body.message.items.map((i: { distanceMeters: number }) => i.distanceMeters);
    expect(distances).toEqual([...distances].sort((a, b) => a - b));
    expect(res.body.message.meta.total).toBe(within.length + anganwadis.filter((a) => nearest2(a, PLACES.karora) <= 15_000).length);
  });

  it('orders by orderingCenter without filtering', async () => {
    const res = await search({ orderingCenter: point(PLACES.ambala) }, { limit: 100 });
    expect(res.body.message.meta).toMatchObject({ total: 48, sort_applied: 'nearest' });
    expect(names(res)[0]).toBe('busAmbala');
    expect(res.body.message.items[0].distanceMeters).toBeCloseTo(0, 3);
    const distances = res.body.message.items.map((i: { distanceMeters: number }) => i.distanceMeters);
    expect(distances).toEqual([...distances].sort((a, b) => a - b));
  });

  it('filters by s_dwithin and orders from orderingCenter when both are given', async () => {
    const res = await search({ spatial: [{ op: 's_dwithin', geometry: point(PLACES.kaithal), distanceMeters: 5_000 }], orderingCenter: point(PLACES.karora) });
    expect(sorted(names(res))).toEqual(['itiKaithal', 'schoolKaithal']);
    expect(res.body.message.items[0].distanceMeters).toBeCloseTo(distance(PLACES.karora, PLACES.kaithal), 3);
  });

  it('infers the order: relevance with text or anchor, else nearest with a centre, else newest', async () => {
    expect((await search({})).body.message.meta.sort_applied).toBe('newest');
    expect((await search({ textSearch: 'school' })).body.message.meta.sort_applied).toBe('relevance');
    expect((await search({ orderingCenter: point(PLACES.delhi) })).body.message.meta.sort_applied).toBe('nearest');
    expect((await search({ item: { id: items.vetKarora.item_id } })).body.message.meta.sort_applied).toBe('relevance');
    // The anchor's location is a centre for nearest.
    const fromAnchor = await search({ item: { id: items.vetKarora.item_id }, sort: 'nearest' });
    expect(fromAnchor.body.message.meta.sort_applied).toBe('nearest');
    expect(names(fromAnchor)[0]).toBe('mobileVet');
    expect(fromAnchor.body.message.items[0].distanceMeters).toBeCloseTo(0, 3);
  });

  it('degrades an order whose precondition is unmet to newest, without an error', async () => {
    const newest = ids(await search({}));
    const relevance = await search({ sort: 'relevance' });
    expect(relevance.status).toBe(200);
    expect(relevance.body.message.meta.sort_applied).toBe('newest');
    expect(ids(relevance)).toEqual(newest);
    const nearestOrder = await search({ sort: 'nearest', textSearch: 'hospital' });
    expect(nearestOrder.body.message.meta.sort_applied).toBe('newest');
    const withCentre = await search({ sort: 'nearest', textSearch: 'hospital', orderingCenter: point(PLACES.karnal) });
    expect(withCentre.body.message.meta.sort_applied).toBe('nearest');
    expect(names(withCentre)[0]).toBe('hospitalKarnal');
    expect(typeof withCentre.body.message.items[0].score).toBe('number');
  });

  it('rejects geometries other than a valid Point and non-positive distances', async () => {
    const bad = [
      { op: 's_dwithin', geometry: { type: 'Polygon', coordinates: [76.5, 29.6] }, distanceMeters: 100 },
      { op: 's_dwithin', geometry: point(PLACES.karora), distanceMeters: 0 },
      { op: 's_dwithin', geometry: { type: 'Point', coordinates: [76.5, 95] }, distanceMeters: 100 },
      { op: 's_intersects', geometry: point(PLACES.karora), distanceMeters: 100 },
    ];
    for (const spatial of bad) {
      const res = await search({ spatial: [spatial] });
      expect(res.status, JSON.stringify(spatial)).toBe(400);
      expect(res.body.message).toContain('message.intent.spatial.0');
    }
  });
});

describe('POST /v1/search: anchor item', () => {
  it('ranks by the anchor embedding, never returns the anchor, and scores by cosine similarity to it', async () => {
    const res = await search({ item: { id: items.vetKarora.item_id } }, { limit: 100 });
    expect(res.status).toBe(200);
    expect(ids(res)).not.toContain(items.vetKarora.item_id);
    expect(res.body.message.meta.total).toBe(47);
    const anchor = await embedding(items.vetKarora.item_id);
    for (const item of res.body.message.items.slice(0, 5)) {
      expect(item.score).toBeCloseTo(cosineSimilarity(anchor, await embedding(item.item_id)), 5);
    }
    expect(['vetPundri', 'mobileVet', 'hospitalKarnal']).toContain(names(res)[0]);
  });

  it('lets textSearch narrow while the anchor ranks', async () => {
    const textOnly = await search({ textSearch: 'school' }, { limit: 100 });
    const both = await search({ textSearch: 'school', item: { id: items.itiKaithal.item_id } }, { limit: 100 });
    expect(both.body.message.meta.sort_applied).toBe('relevance');
    expect(sorted(ids(both))).toEqual(sorted(ids(textOnly)));
    const anchor = await embedding(items.itiKaithal.item_id);
    for (const item of both.body.message.items) expect(item.score).toBeCloseTo(cosineSimilarity(anchor, await embedding(item.item_id)), 5);
  });

  it('answers 404 for an anchor not indexed in the network and 403 when the interaction matrix forbids it', async () => {
    const unknown = await search({ item: { id: randomUUID() } });
    expect(unknown.status).toBe(404);
    expect(unknown.body).toEqual({ error: 'anchor_not_found', message: expect.stringContaining('not indexed') });
    // seeker → seeker is not in the interaction matrix.
    const forbidden = await search({ item: { id: items.electrician.item_id } }, undefined, { domain: 'seeker', itemType: 'seeker_profile' });
    expect(forbidden.status).toBe(403);
    expect(forbidden.body.error).toBe('interaction_not_allowed');
    // seeker → provider is.
    const allowed = await search({ item: { id: items.electrician.item_id } });
    expect(allowed.status).toBe(200);
    expect(names(allowed)[0]).toBe('itiKaithal');
  });
});

describe('POST /v1/search: deep pages', () => {
  for (const [label, intent] of [
    ['newest', { filters: [{ op: 'eq', target: 'item_state.category', value: 'Education' }] }],
    ['relevance', { textSearch: 'anganwadi centre' }],
    ['nearest', { orderingCenter: point(PLACES.delhi) }],
  ] as const) {
    it(`gives complete pages that add up to the exact total (${label})`, async () => {
      const whole = await search(intent, { limit: 100 });
      const total = whole.body.message.meta.total;
      expect(total).toBeGreaterThan(40);
      expect(whole.body.message.items).toHaveLength(total);
      const paged: string[] = [];
      for (let offset = 0; offset < total; offset += 7) {
        const page = await search(intent, { limit: 7, offset });
        expect(page.body.message.meta).toMatchObject({ total, limit: 7, offset, sort_applied: label });
        expect(page.body.message.items).toHaveLength(Math.min(7, total - offset));
        paged.push(...ids(page));
      }
      expect(paged).toEqual(ids(whole));
    });
  }
});

/** Flat keys of a nested body: strings raw, other leaves as JSON text. */
function flatten(value: unknown, prefix = '', out: Record<string, string> = {}): Record<string, string> {
  if (value !== null && typeof value === 'object' && Object.keys(value).length) {
    for (const [k, v] of Object.entries(value)) flatten(v, prefix ? `${prefix}.${k}` : k, out);
  } else {
    out[prefix] = typeof value === 'string' ? value : JSON.stringify(value);
  }
  return out;
}

describe('POST /v1/search/flat', () => {
  const flat = (body: Record<string, unknown>) => request(platform.url('search')).post('/v1/search/flat').set('x-api-key', searchKey).send(body);

  it('answers exactly like the nested request', async () => {
    const bodies = [
      { context: context({ messageId: '12345', timestamp: '2026-01-01T00:00:00Z' }), message: { intent: {} } },
      {
        context: context({ version: '1.0.0' }),
        message: {
          intent: {
            textSearch: 'veternary hospital',
            filters: [{ op: 'eq', target: 'item_state.category', value: 'Medical' }, { op: 'gte', target: 'item_state.capacity', value: 10 },
              { op: 'contains_any', target: 'item_state.services', value: ['surgery', 'vaccination'] }],
            spatial: [{ op: 's_dwithin', geometry: point(PLACES.karora), distanceMeters: 200_000 }],
            orderingCenter: point(PLACES.pundri),
            sort: 'nearest',
          },
          pagination: { limit: 2, offset: 1 },
        },
      },
      { context: context(), message: { intent: { item: { id: items.itiKaithal.item_id }, textSearch: '2024 school' } } },
    ];
    for (const body of bodies) {
      const nested = await request(platform.url('search')).post('/v1/search').set('x-api-key', searchKey).send(body);
      const flattened = flatten(body);
      expect(Object.values(flattened).every((v) => typeof v === 'string')).toBe(true);
      const fromFlat = await flat(flattened);
      expect(nested.status).toBe(200);
      expect(fromFlat.status).toBe(200);
      expect(fromFlat.body).toEqual(nested.body);
    }
  });

  it('turns numeric-looking filter values into numbers and keeps JSON-quoted ones strings', async () => {
    const base = { ...flatten({ context: context() }), 'message.intent.filters.0.op': 'eq', 'message.intent.filters.0.target': 'item_state.external_id' };
    const quoted = await flat({ ...base, 'message.intent.filters.0.value': '"733237"' });
    expect(quoted.status).toBe(200);
    expect(names(quoted)).toEqual(['vetKarora']);
    const numeric = await flat({ ...base, 'message.intent.filters.0.value': '733237' });
    expect(numeric.status).toBe(400);
    expect(numeric.body.message).toContain('eq on external_id needs a string');
    const capacity = await flat({ ...flatten({ context: context() }), 'message.intent.filters.0.op': 'gte', 'message.intent.filters.0.target': 'item_state.capacity', 'message.intent.filters.0.value': '300' });
    expect(sorted(names(capacity))).toEqual(['itiKaithal', 'schoolKaithal']);
  });

  it('rejects dangerous, gapped, oversized and ambiguous keys with 400', async () => {
    const base = { ...flatten({ context: context() }), 'message.intent.textSearch': 'school' };
    const cases: [Record<string, string>, string][] = [
      [{ '__proto__.polluted': 'x' }, '__proto__'],
      [{ 'message.intent.constructor': 'x' }, 'constructor'],
      [{ 'message.prototype.x': 'x' }, 'prototype'],
      [{ 'message.intent.filters.0.op': 'eq', 'message.intent.filters.0.target': 'item_state.category', 'message.intent.filters.0.value': 'Medical',
        'message.intent.filters.2.op': 'eq', 'message.intent.filters.2.target': 'item_state.category', 'message.intent.filters.2.value': 'Medical' }, 'without gaps'],
      [{ 'message.intent.filters.100000000000000000000.op': 'eq' }, 'array index'],
      [{ 'message.intent.filters.01.op': 'eq' }, 'array index 01'],
      [{ 'message.intent.item': 'x', 'message.intent.item.id': items.vetKarora.item_id }, 'both a value and a parent'],
      [{ 'message.intent.spatial.0.op': 's_dwithin', 'message.intent.spatial.op': 'x' }, 'both as an array and as an object'],
      [{ 'message..intent': 'x' }, 'empty path segment'],
    ];
    for (const [extra, text] of cases) {
      const res = await flat({ ...base, ...extra });
      expect(res.status, JSON.stringify(extra)).toBe(400);
      expect(res.body.error).toBe('invalid_request');
      expect(res.body.message).toContain(text);
    }
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
    const notFlat = await request(platform.url('search')).post('/v1/search/flat').set('x-api-key', searchKey).send([1, 2]);
    expect(notFlat.status).toBe(400);
  });

  it('validates the restored body against the canonical schema', async () => {
    const res = await flat({ ...flatten({ context: context() }), 'message.pagination.limit': '500' });
    expect(res.status).toBe(400);
    expect(res.body.message).toContain('message.pagination.limit');
  });
});

describe('POST /v1/relevance', () => {
  const ref = (name: Name) => ({ network: items[name].item_network, domain: items[name].item_domain, type: items[name].item_type, id: items[name].item_id });
  const relevance = (source: unknown, target: unknown) =>
    request(platform.url('search')).post('/v1/relevance').set('x-api-key', searchKey).send({ source, target });

  it('answers a percentage from 0 to 100 computed from the cosine similarity of the stored embeddings', async () => {
    const res = await relevance(ref('vetKarora'), ref('vetPundri'));
    expect(res.status).toBe(200);
    const cosine = cosineSimilarity(await embedding(items.vetKarora.item_id), await embedding(items.vetPundri.item_id));
    expect(res.body).toEqual({ score: Math.round(cosine * 10_000) / 100 });
    expect(res.body.score).toBeGreaterThan(0);
    expect(res.body.score).toBeLessThan(100);
    expect((await relevance(ref('vetKarora'), ref('vetKarora'))).body).toEqual({ score: 100 });
    const seekerToProvider = await relevance(ref('welder'), ref('itiKaithal'));
    expect(seekerToProvider.status).toBe(200);
    expect(seekerToProvider.body.score).toBeGreaterThan((await relevance(ref('welder'), ref('busAmbala'))).body.score);
  });

  it('answers 403 when the interaction matrix does not allow source to target', async () => {
    const res = await relevance(ref('electrician'), ref('welder'));
    expect(res.status).toBe(403);
    expect(res.body).toEqual({ error: 'interaction_not_allowed', message: expect.stringContaining('seeker') });
  });

  it('answers 404 when an item is missing, not indexed under those values, or not live', async () => {
    const missing = await relevance(ref('vetKarora'), { ...ref('vetPundri'), id: randomUUID() });
    expect(missing.status).toBe(404);
    expect(missing.body.error).toBe('item_not_indexed');
    const wrongType = await relevance(ref('vetKarora'), { ...ref('vetPundri'), type: 'school' });
    expect(wrongType.status).toBe(404);
    const draft = await relevance(ref('vetKarora'), ref('draftVet'));
    expect(draft.status).toBe(404);
    expect(draft.body).toEqual({ error: 'item_not_live', message: expect.stringContaining('draft') });
  });

  it('answers 409 when the two embeddings come from different model versions', async () => {
    const extra = provider('Veterinary Sub Centre Siwan', 'Medical', ['kaithal']);
    await platform.ctx.pool.query(
      `INSERT INTO search.items (item_id, item_network, item_domain, item_type, item_state, created_at, source_updated_at, lifecycle_status,
         search_words, content_hash, model_id, model_quantization, model_dimensions, embedding)
       VALUES ($1, 'local-discovery', 'provider', 'facility', $2, now(), now(), 'live', strip(to_tsvector('simple', 'Name: Veterinary Sub Centre Siwan')), 'x',
         'Xenova/all-MiniLM-L6-v2', 'fp32', 3, search.embedding_of('{0.6, 0.8, 0}'))`, [extra.item_id, extra.item_state]);
    const res = await relevance(ref('vetKarora'), { network: 'local-discovery', domain: 'provider', type: 'facility', id: extra.item_id });
    expect(res.status).toBe(409);
    expect(res.body).toEqual({ error: 'model_version_mismatch', message: expect.stringContaining('Xenova/all-MiniLM-L6-v2@fp32/3') });
    await platform.ctx.pool.query('DELETE FROM search.items WHERE item_id = $1', [extra.item_id]);
  });

  it('validates the body (400)', async () => {
    const res = await relevance({ ...ref('vetKarora'), id: 'not-a-uuid' }, ref('vetPundri'));
    expect(res.status).toBe(400);
    expect(res.body.message).toContain('source.id');
  });
});

function nearest2(item: { item_locations: { lat: number; lng: number }[] }, from: { lat: number; lng: number }) {
  return Math.min(...item.item_locations.map((l) => distance(from, l)));
}
