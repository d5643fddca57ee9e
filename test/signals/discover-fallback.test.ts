/**
 * Discover with the search service really stopped (connections refused): every answer comes from
 * signals' native query, `source: native_fallback, degraded: true`. Also every request field and
 * limit of the spec (400 naming the field).
 */
import { randomUUID } from 'node:crypto';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { discoverItems, distanceMeters, PLACES, storeItems, type DiscoverItems } from '../helpers/discover-items.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';

let platform: TestPlatform;
let key: string;
let items: DiscoverItems;

const providers = { item_network: 'local-discovery', item_domain: 'provider', item_type: 'facility' };
const discover = (body: Record<string, unknown>) =>
  request(platform.url('signals')).post('/api/v1/network/item/discover').set('x-api-key', key).send({ ...providers, ...body });
const ids = (body: { items: { item_id: string }[] }) => body.items.map((i) => i.item_id);
const idsOf = (...names: (keyof DiscoverItems)[]) => names.map((n) => items[n].item_id);

/** Live providers, newest first (storeItems stores them in declaration order). */
const NEWEST = ['mobileClinic', 'ambalaBusStand', 'pundriSchool', 'karnalHospital', 'kaithalIti', 'rajoundPhc', 'karoraSchool'] as const;

beforeAll(async () => {
  platform = await startTestPlatform({ services: ['signals', 'search'] });
  key = await platform.apiKey('signals');
  items = discoverItems();
  await storeItems(platform.url('signals'), key, items);
  // Stop the search service for real: from now on connections to it are refused.
  await platform.services.find((s) => s.name === 'search')!.close();
  await expect(fetch(`${platform.ctx.urls.search}/health`)).rejects.toThrow();
});
afterAll(() => platform.stop());

describe('discover request validation', () => {
  const cases: [string, Record<string, unknown>, string][] = [
    ['item_network empty', { item_network: '' }, 'item_network'],
    ['item_network of another network', { item_network: 'elsewhere' }, 'item_network'],
    ['item_domain empty', { item_domain: '' }, 'item_domain'],
    ['item_domain unknown', { item_domain: 'volunteer' }, 'item_domain'],
    ['item_type empty', { item_type: '' }, 'item_type'],
    ['item_type not the domain\'s', { item_type: 'seeker_profile' }, 'item_type'],
    ['q empty', { q: '' }, 'q'],
    ['q blank', { q: '   ' }, 'q'],
    ['q not a string', { q: 5 }, 'q'],
    ['filters not an array', { filters: { field: 'category' } }, 'filters'],
    ['more than 16 filters (the search service takes 20, four kept for a bounding box)', { filters: Array.from({ length: 17 }, () => ({ field: 'category', values: ['Education'] })) }, 'filters'],
    ['more than 100 filter values', { filters: [{ field: 'district', values: Array.from({ length: 101 }, (_, i) => `d${i}`) }] }, 'filters.0.values'],
    ['q longer than 1000 characters', { q: 'a'.repeat(1001) }, 'q'],
    ['filter field empty', { filters: [{ field: '', values: ['Education'] }] }, 'filters.0.field'],
    ['filter values empty', { filters: [{ field: 'category', values: [] }] }, 'filters.0.values'],
    ['filter values missing', { filters: [{ field: 'category' }] }, 'filters.0.values'],
    ['filter field unknown', { filters: [{ field: 'colour', values: ['red'] }] }, 'filters.0.field'],
    ['filter field private', { filters: [{ field: 'phone', values: ['+919876543210'] }] }, 'filters.0.field'],
    ['filter value outside the enum', { filters: [{ field: 'category', values: ['Education', 'Banking'] }] }, 'filters.0.values.1'],
    ['filter value of the wrong kind', { filters: [{ field: 'capacity', values: ['many'] }] }, 'filters.0.values.0'],
    ['sort unknown', { sort: 'best' }, 'sort'],
    ['item_latitude above 90', { item_latitude: 90.01, item_longitude: 76 }, 'item_latitude'],
    ['item_latitude below -90', { item_latitude: -90.01, item_longitude: 76 }, 'item_latitude'],
    ['item_longitude above 180', { item_latitude: 29, item_longitude: 180.01 }, 'item_longitude'],
    ['item_longitude below -180', { item_latitude: 29, item_longitude: -180.01 }, 'item_longitude'],
    ['item_latitude without item_longitude', { item_latitude: 29 }, 'item_longitude'],
    ['min_lat below -90', { min_lat: -91, max_lat: 30, min_lng: 76, max_lng: 77 }, 'min_lat'],
    ['max_lat above 90', { min_lat: 29, max_lat: 91, min_lng: 76, max_lng: 77 }, 'max_lat'],
    ['min_lng below -180', { min_lat: 29, max_lat: 30, min_lng: -181, max_lng: 77 }, 'min_lng'],
    ['max_lng above 180', { min_lat: 29, max_lat: 30, min_lng: 76, max_lng: 181 }, 'max_lng'],
    ['bounding box incomplete', { min_lat: 29, max_lat: 30, min_lng: 76 }, 'max_lng'],
    ['bounding box upside down', { min_lat: 30, max_lat: 29, min_lng: 76, max_lng: 77 }, 'min_lat'],
    ['bounding box across the antimeridian', { min_lat: 29, max_lat: 30, min_lng: 179, max_lng: -179 }, 'min_lng'],
    ['distance_meters not a number', { item_latitude: 29, item_longitude: 76, distance_meters: '5km' }, 'distance_meters'],
    ['distance_meters negative', { item_latitude: 29, item_longitude: 76, distance_meters: -5 }, 'distance_meters'],
    ['distance_meters without a centre', { distance_meters: 5000 }, 'distance_meters'],
    ['ordering_latitude above 90', { ordering_latitude: 91, ordering_longitude: 76 }, 'ordering_latitude'],
    ['ordering_longitude below -180', { ordering_latitude: 29, ordering_longitude: -181 }, 'ordering_longitude'],
    ['ordering_longitude without ordering_latitude', { ordering_longitude: 76 }, 'ordering_latitude'],
    ['anchor_item_id not a uuid', { anchor_item_id: 'item-1' }, 'anchor_item_id'],
    ['limit 0', { limit: 0 }, 'limit'],
    ['limit 101', { limit: 101 }, 'limit'],
    ['limit not an integer', { limit: 2.5 }, 'limit'],
    ['limit as a string', { limit: '20' }, 'limit'],
    ['offset negative', { offset: -1 }, 'offset'],
    ['offset beyond 9007199254740991', { offset: 9007199254740992 }, 'offset'],
    ['an unknown field', { radius: 5 }, '(root)'],
  ];
  it.each(cases)('answers 400 naming the field: %s', async (_name, body, field) => {
    const res = await discover(body);
    expect(res.status).toBe(400);
    expect(res.body.error).toBe('invalid_request');
    expect(res.body.message).toContain(`${field}:`);
    expect(Object.keys(res.body)).toEqual(['error', 'message']);
  });

  it('requires the identity values and an API key', async () => {
    const missing = await request(platform.url('signals')).post('/api/v1/network/item/discover').set('x-api-key', key).send({});
    expect(missing.status).toBe(400);
    for (const field of ['item_network', 'item_domain', 'item_type']) expect(missing.body.message).toContain(field);
    const noKey = await request(platform.url('signals')).post('/api/v1/network/item/discover').send(providers);
    expect(noKey.status).toBe(401);
  });

  it('accepts the limits at their bounds', async () => {
    const res = await discover({ limit: 100, offset: 9007199254740991 });
    expect(res.status).toBe(200);
    expect(res.body.meta).toMatchObject({ total: 7, limit: 100, offset: 9007199254740991 });
    expect(res.body.items).toEqual([]);
    const one = await discover({ limit: 1, offset: 0 });
    expect(one.body.items).toHaveLength(1);
  });
});

describe('discover with the search service stopped (native fallback)', () => {
  it('answers live items only, newest first, with an exact total and the default limit', async () => {
    const res = await discover({});
    expect(res.status).toBe(200);
    expect(res.body.meta).toEqual({
      total: 7, limit: 20, offset: 0, source: 'native_fallback', degraded: true, sort_applied: 'newest', anchor_applied: false,
    });
    expect(ids(res.body)).toEqual(idsOf(...NEWEST));
    const school = res.body.items.find((i: { item_id: string }) => i.item_id === items.karoraSchool.item_id);
    expect(school).toMatchObject({
      ...providers, item_state: items.karoraSchool.item_state, item_locations: items.karoraSchool.item_locations,
      item_instance_url: null, item_schema_url: null, created_by: null, lifecycle_status: 'live',
    });
    expect(Date.parse(school.created_at)).not.toBeNaN();
    expect(Date.parse(school.updated_at)).not.toBeNaN();
    expect(school).not.toHaveProperty('search_text');
    expect(school).not.toHaveProperty('distanceMeters');
  });

  it('pages with limit and offset while the total stays exact', async () => {
    const res = await discover({ limit: 3, offset: 2 });
    expect(res.body.meta).toMatchObject({ total: 7, limit: 3, offset: 2 });
    expect(ids(res.body)).toEqual(idsOf(...NEWEST.slice(2, 5)));
    const last = await discover({ limit: 3, offset: 6 });
    expect(ids(last.body)).toEqual(idsOf(NEWEST[6]));
  });

  it('matches text by words, tolerating misspellings, ranked by relevance', async () => {
    const exact = await discover({ q: 'school' });
    expect(exact.body.meta).toMatchObject({ total: 2, sort_applied: 'relevance', source: 'native_fallback', degraded: true });
    expect(new Set(ids(exact.body))).toEqual(new Set(idsOf('karoraSchool', 'pundriSchool')));
    for (const item of exact.body.items) expect(item.score).toBe(1);

    const misspelt = await discover({ q: 'scool karoraa' });
    expect(misspelt.body.meta.total).toBe(1);
    expect(ids(misspelt.body)).toEqual(idsOf('karoraSchool'));
    expect(misspelt.body.items[0].score).toBeGreaterThan(0.4);
    expect(misspelt.body.items[0].score).toBeLessThan(1);

    const training = await discover({ q: 'trainig' });
    expect(new Set(ids(training.body))).toEqual(new Set(idsOf('karoraSchool', 'kaithalIti')));

    const prefix = await discover({ q: 'hosp' });
    expect(ids(prefix.body)).toEqual(idsOf('karnalHospital'));
    const misspeltPlace = await discover({ q: 'karnl' });
    expect(ids(misspeltPlace.body)).toEqual(idsOf('karnalHospital'));
    // Labels of the searchable text ("District: …") are not content.
    const label = await discover({ q: 'district' });
    expect(label.body.meta.total).toBe(0);

    const nothing = await discover({ q: 'veterinary' });
    expect(nothing.body.meta.total).toBe(0);
    expect(nothing.body.items).toEqual([]);
  });

  it('applies filters: one of the values, any of them for array fields, filters ANDed', async () => {
    const education = await discover({ filters: [{ field: 'category', values: ['Education'] }] });
    expect(education.body.meta.total).toBe(3);
    expect(ids(education.body)).toEqual(idsOf('pundriSchool', 'kaithalIti', 'karoraSchool'));

    const services = await discover({ filters: [{ field: 'services', values: ['welding', 'maternal care'] }] });
    expect(new Set(ids(services.body))).toEqual(new Set(idsOf('kaithalIti', 'rajoundPhc', 'mobileClinic')));

    const both = await discover({ filters: [{ field: 'category', values: ['Medical'] }, { field: 'services', values: ['maternal care', 'emergency'] }] });
    expect(new Set(ids(both.body))).toEqual(new Set(idsOf('rajoundPhc', 'mobileClinic', 'karnalHospital')));
    const narrower = await discover({ filters: [{ field: 'category', values: ['Medical'] }, { field: 'district', values: ['Kaithal'] }] });
    expect(new Set(ids(narrower.body))).toEqual(new Set(idsOf('rajoundPhc', 'mobileClinic')));

    const withText = await discover({ q: 'govt', filters: [{ field: 'district', values: ['Kaithal'] }] });
    expect(new Set(ids(withText.body))).toEqual(new Set(idsOf('karoraSchool', 'pundriSchool')));

    const numeric = await discover({ filters: [{ field: 'latitude', values: [String(PLACES.ambala.lat)] }] });
    expect(ids(numeric.body)).toEqual(idsOf('ambalaBusStand'));
  });

  it('keeps items with any location inside the bounding box', async () => {
    const res = await discover({ min_lat: 29.6, max_lat: 29.85, min_lng: 76.35, max_lng: 76.6 });
    expect(res.body.meta.total).toBe(5);
    expect(ids(res.body)).toEqual(idsOf('mobileClinic', 'pundriSchool', 'kaithalIti', 'rajoundPhc', 'karoraSchool'));
    expect(res.body.meta).not.toHaveProperty('distance_meters');
  });

  it('keeps items within distance_meters of the point, with each item\'s distance to its nearest location', async () => {
    const res = await discover({ item_latitude: PLACES.karora.lat, item_longitude: PLACES.karora.lng, distance_meters: 15_000 });
    expect(res.body.meta).toMatchObject({ total: 4, distance_meters: 15_000, sort_applied: 'nearest' });
    expect(ids(res.body)).toEqual(idsOf('mobileClinic', 'karoraSchool', 'pundriSchool', 'rajoundPhc'));
    const expected = [0, 0, distanceMeters(PLACES.karora, PLACES.pundri), distanceMeters(PLACES.karora, PLACES.rajound)];
    res.body.items.forEach((item: { distanceMeters: number }, i: number) => expect(item.distanceMeters).toBeCloseTo(expected[i], 3));
    expect(expected[3]).toBeGreaterThan(10_000);

    const newest = await discover({ item_latitude: PLACES.karora.lat, item_longitude: PLACES.karora.lng, distance_meters: 15_000, sort: 'newest' });
    expect(ids(newest.body)).toEqual(idsOf('mobileClinic', 'pundriSchool', 'rajoundPhc', 'karoraSchool'));
    expect(newest.body.items.every((i: { distanceMeters?: number }) => typeof i.distanceMeters === 'number')).toBe(true);
  });

  it('orders by the ordering point without filtering', async () => {
    const res = await discover({ ordering_latitude: PLACES.ambala.lat, ordering_longitude: PLACES.ambala.lng });
    expect(res.body.meta).toMatchObject({ total: 7, sort_applied: 'nearest' });
    expect(res.body.meta).not.toHaveProperty('distance_meters');
    const distances = res.body.items.map((i: { distanceMeters: number }) => i.distanceMeters);
    expect(distances).toEqual([...distances].sort((a, b) => a - b));
    expect(res.body.items[0].item_id).toBe(items.ambalaBusStand.item_id);
    expect(res.body.items[0].distanceMeters).toBe(0);
    const clinic = res.body.items.find((i: { item_id: string }) => i.item_id === items.mobileClinic.item_id);
    expect(clinic.distanceMeters).toBeCloseTo(distanceMeters(PLACES.ambala, PLACES.karora), 3);

    const fromPoint = await discover({ item_latitude: PLACES.karnal.lat, item_longitude: PLACES.karnal.lng });
    expect(fromPoint.body.meta).toMatchObject({ total: 7, sort_applied: 'nearest' });
    expect(fromPoint.body.items[0].item_id).toBe(items.karnalHospital.item_id);
  });

  it('infers the order and degrades a requested order whose precondition is unmet to newest', async () => {
    const nearest = await discover({ sort: 'nearest' });
    expect(nearest.body.meta.sort_applied).toBe('newest');
    expect(ids(nearest.body)).toEqual(idsOf(...NEWEST));
    const relevance = await discover({ sort: 'relevance' });
    expect(relevance.body.meta.sort_applied).toBe('newest');
    const textButNewest = await discover({ q: 'school', sort: 'newest' });
    expect(textButNewest.body.meta.sort_applied).toBe('newest');
    expect(ids(textButNewest.body)).toEqual(idsOf('pundriSchool', 'karoraSchool'));
    expect(textButNewest.body.items[0]).not.toHaveProperty('score');
    const textNearest = await discover({ q: 'school', ordering_latitude: PLACES.pundri.lat, ordering_longitude: PLACES.pundri.lng });
    expect(textNearest.body.meta.sort_applied).toBe('relevance');
    const explicitNearest = await discover({ q: 'school', sort: 'nearest', ordering_latitude: PLACES.karora.lat, ordering_longitude: PLACES.karora.lng });
    expect(explicitNearest.body.meta.sort_applied).toBe('nearest');
    expect(ids(explicitNearest.body)).toEqual(idsOf('karoraSchool', 'pundriSchool'));
  });

  it('uses an anchor\'s own location for nearest, never returns the anchor, and reports anchor_applied false', async () => {
    const res = await discover({ anchor_item_id: items.electrician.item_id });
    expect(res.body.meta).toMatchObject({ total: 7, sort_applied: 'nearest', anchor_applied: false, source: 'native_fallback' });
    expect(ids(res.body).slice(0, 4)).toEqual(idsOf('mobileClinic', 'karoraSchool', 'pundriSchool', 'rajoundPhc'));

    const noLocation = await discover({ anchor_item_id: items.tailor.item_id });
    expect(noLocation.body.meta).toMatchObject({ sort_applied: 'newest', anchor_applied: false });
    const relevance = await discover({ anchor_item_id: items.electrician.item_id, sort: 'relevance' });
    expect(relevance.body.meta).toMatchObject({ sort_applied: 'newest', anchor_applied: false });

    const self = await discover({ anchor_item_id: items.karoraSchool.item_id });
    expect(self.body.meta.total).toBe(6);
    expect(ids(self.body)).not.toContain(items.karoraSchool.item_id);
  });

  it('answers 404 for an unknown or retired anchor and 403 when the interaction matrix forbids it', async () => {
    const unknown = await discover({ anchor_item_id: randomUUID() });
    expect(unknown.status).toBe(404);
    expect(unknown.body.error).toBe('anchor_not_found');
    const retired = await discover({ anchor_item_id: items.retiredSchool.item_id });
    expect(retired.status).toBe(404);
    const seekers = await request(platform.url('signals')).post('/api/v1/network/item/discover').set('x-api-key', key)
      .send({ item_network: 'local-discovery', item_domain: 'seeker', item_type: 'seeker_profile', anchor_item_id: items.electrician.item_id });
    expect(seekers.status).toBe(403);
    expect(seekers.body).toEqual({ error: 'interaction_not_allowed', message: expect.stringContaining('seeker') });
  });

  it('combines text, distance and nearest order', async () => {
    const res = await discover({ q: 'school', item_latitude: PLACES.karora.lat, item_longitude: PLACES.karora.lng, distance_meters: 12_000, sort: 'nearest' });
    expect(res.body.meta).toMatchObject({ total: 2, sort_applied: 'nearest', distance_meters: 12_000 });
    expect(ids(res.body)).toEqual(idsOf('karoraSchool', 'pundriSchool'));
  });

  it('discovers seekers too', async () => {
    const res = await request(platform.url('signals')).post('/api/v1/network/item/discover').set('x-api-key', key)
      .send({ item_network: 'local-discovery', item_domain: 'seeker', item_type: 'seeker_profile', q: 'electrcian' });
    expect(res.status).toBe(200);
    expect(ids(res.body)).toEqual(idsOf('electrician'));
  });
});
