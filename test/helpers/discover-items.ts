/**
 * Items for the discover and match-score tests: facilities and seekers around Kaithal (Haryana)
 * with known places, stored one by one through signals' `PUT /api/v1/items/{id}` so each has its
 * own created_at (newest order is then known: the order of `storeItems`).
 */
import { randomUUID } from 'node:crypto';
import request from 'supertest';
import { expect } from 'vitest';
import type { Queryable } from '../../lib/platform/db.ts';

export const PLACES = {
  karora: { lat: 29.6574, lng: 76.5421 },
  rajound: { lat: 29.7402, lng: 76.4480 },
  kaithal: { lat: 29.8015, lng: 76.3998 },
  pundri: { lat: 29.7608, lng: 76.5619 },
  karnal: { lat: 29.6857, lng: 76.9905 },
  ambala: { lat: 30.3782, lng: 76.7767 },
  delhi: { lat: 28.6139, lng: 77.2090 },
};
type Place = keyof typeof PLACES;

const facility = (name: string, category: string, district: string, at: Place, extra: Record<string, unknown> = {}, more: Place[] = []) => ({
  item_network: 'local-discovery', item_domain: 'provider', item_type: 'facility', item_id: randomUUID(),
  item_state: { name, category, district, state: 'Haryana', latitude: PLACES[at].lat, longitude: PLACES[at].lng, ...extra },
  item_locations: [at, ...more].map((p) => ({ lat: PLACES[p].lat, lng: PLACES[p].lng })),
});

/**
 * Health centre number `i` at one point near Kaithal, with a fresh item id: for tests that only
 * need many valid, distinct facilities (indexing, catch-up, batching).
 */
export const healthCentre = (i: number) => ({
  item_network: 'local-discovery', item_domain: 'provider', item_type: 'facility', item_id: randomUUID(),
  item_state: { name: `Primary Health Centre ${i}`, category: 'Medical', district: 'Kaithal', state: 'Haryana', latitude: 29.8, longitude: 76.4 },
  item_locations: [{ lat: 29.8, lng: 76.4 }],
});

const seeker = (skills: string[], district: string, at: Place | null, extra: Record<string, unknown> = {}) => ({
  item_network: 'local-discovery', item_domain: 'seeker', item_type: 'seeker_profile', item_id: randomUUID(),
  item_state: { skills, district, state: 'Haryana', ...(at ? { latitude: PLACES[at].lat, longitude: PLACES[at].lng } : {}), ...extra },
  item_locations: at ? [{ lat: PLACES[at].lat, lng: PLACES[at].lng }] : [],
});

/** A fresh set of items (new ids each call), in the order they are stored (oldest first). */
export function discoverItems() {
  return {
    karoraSchool: facility('Govt Sr Secondary School Karora', 'Education', 'Kaithal', 'karora',
      { services: ['vocational training', 'computer lab'], languages: ['Hindi', 'Punjabi'], locality: 'Karora', block: 'Rajound' }),
    rajoundPhc: facility('Primary Health Centre Rajound', 'Medical', 'Kaithal', 'rajound', { services: ['maternal care'], block: 'Rajound' }),
    kaithalIti: facility('Industrial Training Institute Kaithal', 'Education', 'Kaithal', 'kaithal',
      { services: ['electrician training', 'welding'], languages: ['Hindi'] }),
    karnalHospital: facility('Civil Hospital Karnal', 'Medical', 'Karnal', 'karnal', { services: ['emergency'] }),
    pundriSchool: facility('Govt High School Pundri', 'Education', 'Kaithal', 'pundri', { services: ['computer lab'] }),
    ambalaBusStand: facility('Bus Stand Ambala', 'Transport/Admin', 'Ambala', 'ambala'),
    // Two locations: its office in Delhi and a camp near Karora.
    mobileClinic: facility('Mobile Health Clinic', 'Medical', 'Kaithal', 'delhi', { services: ['maternal care'] }, ['karora']),
    retiredSchool: facility('Govt Primary School Karora Old', 'Education', 'Kaithal', 'karora'),
    // No coordinates: stays draft (go-live rules need latitude and longitude).
    draftSchool: { ...facility('Govt School Karora Draft', 'Education', 'Kaithal', 'karora'), item_locations: [],
      item_state: { name: 'Govt School Karora Draft', category: 'Education', district: 'Kaithal', state: 'Haryana' } },
    electrician: seeker(['electrician', 'solar panel installation'], 'Kaithal', 'karora',
      { languages: ['Hindi', 'Punjabi'], preferred_job_type: 'full_time', education: 'iti' }),
    tailor: seeker(['tailoring'], 'Ambala', null, { languages: ['Hindi'] }),
  };
}
export type DiscoverItems = ReturnType<typeof discoverItems>;

/** Stores `items` one by one (PUT) and retires `retiredSchool`. */
export async function storeItems(signalsUrl: string, key: string, items: DiscoverItems): Promise<void> {
  for (const item of Object.values(items)) {
    const res = await request(signalsUrl).put(`/api/v1/items/${item.item_id}`).set('x-api-key', key).send(item);
    expect(res.status, JSON.stringify(res.body)).toBe(201);
  }
  const retired = await request(signalsUrl).post(`/api/v1/items/${items.retiredSchool.item_id}/lifecycle`).set('x-api-key', key)
    .send({ lifecycle_status: 'retired' });
  expect(retired.status).toBe(200);
}

/** Haversine distance in metres on the mean Earth radius (the same formula as the platform's). */
export function distanceMeters(a: { lat: number; lng: number }, b: { lat: number; lng: number }): number {
  const rad = (d: number) => (d * Math.PI) / 180;
  const h = Math.sin(rad(b.lat - a.lat) / 2) ** 2 + Math.cos(rad(a.lat)) * Math.cos(rad(b.lat)) * Math.sin(rad(b.lng - a.lng) / 2) ** 2;
  return 2 * 6371008.8 * Math.asin(Math.min(1, Math.sqrt(h)));
}

/**
 * Waits until the search-index-items task has indexed every one of `ids` as signals holds it now
 * (polls search.items against signals.items): a live item in search.items, live; an item of
 * another status there with that status, or absent. A retirement is a second job after the
 * item's first: waiting for the row alone let a search count a retired item as live.
 */
export async function waitForIndex(db: Queryable, ids: string[], timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const { rows } = await db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM signals.items s LEFT JOIN search.items x ON x.item_id = s.item_id
        WHERE s.item_id = ANY($1::uuid[])
          AND ((x.item_id IS NULL AND s.lifecycle_status = 'live') OR x.lifecycle_status <> s.lifecycle_status)`,
      [ids]);
    if (rows[0].n === 0) return;
    if (Date.now() > deadline) throw new Error(`${rows[0].n} of ${ids.length} items not indexed as signals holds them after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
