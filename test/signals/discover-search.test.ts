/**
 * Discover answered by the real search service (`source: signals_search`): items stored at
 * signals, indexed by the search-index-items task (graphile-worker, hashing embeddings). Then the
 * search service is stopped and the same queries are answered natively: both paths must agree.
 */
import { randomUUID } from 'node:crypto';
import { Writable } from 'node:stream';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../lib/platform/logger.ts';
import { discoverItems, distanceMeters, PLACES, storeItems, waitForIndex, type DiscoverItems } from '../helpers/discover-items.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';

let platform: TestPlatform;
let key: string;
let items: DiscoverItems;

const providers = { item_network: 'local-discovery', item_domain: 'provider', item_type: 'facility' };
const discover = (body: Record<string, unknown>) =>
  request(platform.url('signals')).post('/api/v1/network/item/discover').set('x-api-key', key).send({ ...providers, ...body });
const ids = (body: { items: { item_id: string }[] }) => body.items.map((i) => i.item_id);
const idsOf = (...names: (keyof DiscoverItems)[]) => names.map((n) => items[n].item_id);

/** Queries whose answers must be the same from the search service and from the native fallback. */
const PARITY: Record<string, Record<string, unknown>> = {
  'newest (default)': {},
  'a page': { limit: 2, offset: 3 },
  'filter on a scalar field': { filters: [{ field: 'category', values: ['Education', 'Transport/Admin'] }] },
  'filter on an array field': { filters: [{ field: 'services', values: ['computer lab', 'welding'] }] },
  'filters ANDed': { filters: [{ field: 'category', values: ['Medical'] }, { field: 'district', values: ['Kaithal'] }] },
  'distance': { item_latitude: PLACES.karora.lat, item_longitude: PLACES.karora.lng, distance_meters: 15_000 },
  'distance, newest': { item_latitude: PLACES.karora.lat, item_longitude: PLACES.karora.lng, distance_meters: 15_000, sort: 'newest' },
  'ordering point': { ordering_latitude: PLACES.ambala.lat, ordering_longitude: PLACES.ambala.lng },
  'bounding box': { min_lat: 29.7, max_lat: 30.5, min_lng: 76.3, max_lng: 77.1 },
  'nearest without a centre degrades': { sort: 'nearest' },
};
/** Warnings the platform logged, e.g. why discover answered natively: shown when a search-path assertion fails. */
const warnings: string[] = [];
const loggedWarnings = () => `warnings logged: ${warnings.join('') || 'none'}`;
const answers = new Map<string, { total: number; ids: string[]; sort: string; distances: (number | undefined)[] }>();

beforeAll(async () => {
  // A generous SEARCH_TIMEOUT_MS: these tests are about the search path's answers, and on a
  // loaded CI machine a first request was once answered natively (the 2 s default is the likely
  // cause; the warning was not kept then, it is now). The timeout itself is tested in
  // discover-search-failures.test.ts.
  const sink = new Writable({ write(chunk, _encoding, done) { warnings.push(String(chunk)); done(); } });
  platform = await startTestPlatform({
    services: ['signals', 'search'], worker: true, env: { EMBEDDING_PROVIDER: 'hashing', SEARCH_TIMEOUT_MS: '30000' },
    logger: createLogger('warn', 'ldp', sink),
  });
  key = await platform.apiKey('signals');
  items = discoverItems();
  await storeItems(platform.url('signals'), key, items);
  await waitForIndex(platform.ctx.pool, Object.values(items).map((i) => i.item_id));
});
afterAll(() => platform.stop());

describe('discover through the search service', () => {
  it('answers from the search service with live items only, newest first', async () => {
    const res = await discover({});
    expect(res.status).toBe(200);
    expect(res.body.meta, loggedWarnings()).toEqual({ total: 7, limit: 20, offset: 0, source: 'signals_search', degraded: false, sort_applied: 'newest', anchor_applied: false });
    expect(ids(res.body)).toEqual(idsOf('mobileClinic', 'ambalaBusStand', 'pundriSchool', 'karnalHospital', 'kaithalIti', 'rajoundPhc', 'karoraSchool'));
    expect(res.body.items[0]).toMatchObject({ ...providers, item_state: items.mobileClinic.item_state, item_locations: items.mobileClinic.item_locations });
  });

  it('ranks text by relevance with scores', async () => {
    const res = await discover({ q: 'school' });
    expect(res.body.meta, loggedWarnings()).toMatchObject({ source: 'signals_search', sort_applied: 'relevance', anchor_applied: false });
    expect(ids(res.body).slice(0, 2).sort()).toEqual(idsOf('karoraSchool', 'pundriSchool').sort());
    expect(res.body.items.every((i: { score?: number }) => typeof i.score === 'number')).toBe(true);
  });

  it('ranks by the anchor\'s embedding and says so', async () => {
    const res = await discover({ anchor_item_id: items.electrician.item_id });
    expect(res.body.meta, loggedWarnings()).toMatchObject({ source: 'signals_search', sort_applied: 'relevance', anchor_applied: true, total: 7 });
    const newest = await discover({ anchor_item_id: items.electrician.item_id, sort: 'newest' });
    expect(newest.body.meta).toMatchObject({ sort_applied: 'newest', anchor_applied: false });
  });

  it('passes the search service\'s refusals on: unknown anchor, interaction not allowed', async () => {
    const unknown = await discover({ anchor_item_id: randomUUID() });
    expect(unknown.status).toBe(404);
    expect(unknown.body).toEqual({ error: 'anchor_not_found', message: expect.any(String) });
    const seekers = await request(platform.url('signals')).post('/api/v1/network/item/discover').set('x-api-key', key)
      .send({ item_network: 'local-discovery', item_domain: 'seeker', item_type: 'seeker_profile', anchor_item_id: items.electrician.item_id });
    expect(seekers.status).toBe(403);
    expect(seekers.body.error).toBe('interaction_not_allowed');
  });

  it('reports distances from the distance point', async () => {
    const res = await discover({ item_latitude: PLACES.karora.lat, item_longitude: PLACES.karora.lng, distance_meters: 15_000 });
    expect(res.body.meta, loggedWarnings()).toMatchObject({ source: 'signals_search', total: 4, distance_meters: 15_000, sort_applied: 'nearest' });
    const pundri = res.body.items.find((i: { item_id: string }) => i.item_id === items.pundriSchool.item_id);
    expect(pundri.distanceMeters).toBeCloseTo(distanceMeters(PLACES.karora, PLACES.pundri), 0);
  });

  it.each(Object.entries(PARITY))('answers %s', async (name, body) => {
    const res = await discover(body);
    expect(res.status).toBe(200);
    expect(res.body.meta.source, loggedWarnings()).toBe('signals_search');
    answers.set(name, {
      total: res.body.meta.total, ids: ids(res.body), sort: res.body.meta.sort_applied,
      distances: res.body.items.map((i: { distanceMeters?: number }) => i.distanceMeters),
    });
  });
});

describe('the same queries with the search service stopped', () => {
  beforeAll(async () => {
    await platform.services.find((s) => s.name === 'search')!.close();
  });

  it.each(Object.entries(PARITY))('answers %s natively as the search service did', async (name, body) => {
    const res = await discover(body);
    expect(res.body.meta).toMatchObject({ source: 'native_fallback', degraded: true });
    const viaSearch = answers.get(name)!;
    expect({ total: res.body.meta.total, ids: ids(res.body), sort: res.body.meta.sort_applied }).toEqual({ total: viaSearch.total, ids: viaSearch.ids, sort: viaSearch.sort });
    res.body.items.forEach((item: { distanceMeters?: number }, i: number) => {
      if (viaSearch.distances[i] === undefined) expect(item.distanceMeters).toBeUndefined();
      else expect(item.distanceMeters).toBeCloseTo(viaSearch.distances[i]!, 1);
    });
  });
});
