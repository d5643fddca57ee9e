/**
 * Grid cells of item locations (sql/019_search_geo_cells.sql, lib/search/geo-cells.ts) on the
 * embedded PostgreSQL: the stored cells are the ones the search computes, a place's cover holds the
 * cell of every location in its box (cell edges, the ends of the ranges), a text search within a
 * place answers alike whichever way it reads its matches (cells, text-first, hashed, place-first),
 * including items with several locations or none, circles whose box crosses the antimeridian or
 * reaches a pole (no cells read), and an item whose locations change: its cells follow.
 */
import { randomUUID } from 'node:crypto';
import request from 'supertest';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { boundingBox } from '../../lib/network/geo.ts';
import { createSearchEngine, searchEngine } from '../../lib/search/engine.ts';
import { CELL_LEVELS, coverCells, geoCells, MAX_COVER_CELLS } from '../../lib/search/geo-cells.ts';
import { runSearch, type PlaceRead } from '../../lib/search/query.ts';
import { searchBodySchema } from '../../lib/search/request.ts';
import { startTestPlatform, type TestPlatform } from '../helpers/platform.ts';
import { until } from '../helpers/until.ts';

let platform: TestPlatform;
let signalsKey: string;
let parts: Parameters<typeof createSearchEngine>[0];

type Location = { lat: number; lng: number };
const item = (name: string, locations: Location[]) => ({
  item_network: 'local-discovery', item_domain: 'provider', item_type: 'facility', item_id: randomUUID(),
  // The state's coordinates (required to go live) must lie in India; the locations are what search reads.
  item_state: { name, category: 'Agro', district: 'Kaithal', state: 'Haryana', capacity: 1, latitude: 29.8, longitude: 76.4 },
  item_locations: locations,
});
// Dairies around Kaithal (one on a corner of cells at every level), one with two far-apart
// locations, one without locations, and dairies by the antimeridian and by the North Pole.
const around = Array.from({ length: 30 }, (_, i) => item(`Dairy ${i}`, [{ lat: 29.5 + (i % 6) * 0.07, lng: 76.1 + (i % 5) * 0.09 }]));
const edge = item('Edge Dairy', [{ lat: 29.75, lng: 76.25 }]);
const twin = item('Twin Dairy', [{ lat: 29.6, lng: 76.3 }, { lat: 31.1, lng: 77.2 }]);
const placeless = item('Placeless Dairy', []);
const dateline = [item('Dateline Dairy East', [{ lat: -16.8, lng: 179.99 }]), item('Dateline Dairy West', [{ lat: -16.81, lng: -179.98 }])];
const polar = item('Polar Dairy', [{ lat: 89.95, lng: 120 }]);
const items = [...around, edge, twin, placeless, ...dateline, polar];

const body = (intent: Record<string, unknown>, pagination: Record<string, unknown> = {}) => searchBodySchema.parse({
  context: { messageId: 'm', networkId: 'local-discovery', domain: 'provider', itemType: 'facility' },
  message: { intent, pagination },
});
const near = (lat: number, lng: number, distanceMeters: number) => ({ op: 's_dwithin', geometry: { type: 'Point', coordinates: [lng, lat] }, distanceMeters });
const storedCells = async (id: string) =>
  (await platform.ctx.pool.query<{ c: number[] }>(`SELECT geo_cells AS c FROM search.items WHERE item_id = $1`, [id])).rows[0]?.c;

beforeAll(async () => {
  platform = await startTestPlatform({ services: ['signals', 'search'], worker: true, env: { EMBEDDING_PROVIDER: 'hashing' } });
  signalsKey = await platform.apiKey('signals');
  const res = await request(platform.url('signals')).post('/api/v1/items/batch').set('x-api-key', signalsKey).send({ items });
  expect(res.body.summary.created).toBe(items.length);
  await until('items to be indexed', async () =>
    (await platform.ctx.pool.query(`SELECT count(*)::int AS n FROM search.items WHERE lifecycle_status = 'live'`)).rows[0].n === items.length);
  const engine = await searchEngine(platform.ctx);
  parts = { network: engine.network, backend: engine.backend, provider: engine.provider, transaction: engine.transaction };
});
afterAll(() => platform?.stop());

/** The search with every place read forced, and with the default; all must give the same message. */
async function sameEveryWay(intent: Record<string, unknown>, pagination?: Record<string, unknown>) {
  const expected = await runSearch(createSearchEngine({ ...parts, placeRead: 'text-first' }), body(intent, pagination));
  for (const placeRead of ['cells', 'hashed', 'place-first', undefined] as (PlaceRead | undefined)[]) {
    expect((await runSearch(createSearchEngine({ ...parts, placeRead }), body(intent, pagination))).message, `${placeRead} ${JSON.stringify(intent)}`)
      .toEqual(expected.message);
  }
  return expected.message;
}
const ids = (message: { items: { item_id: string }[] }) => message.items.map((i) => i.item_id);

describe('grid cells of item locations', () => {
  it('stores for every row the cells lib/search/geo-cells.ts computes, on cell edges and at the ends of the ranges', async () => {
    for (const i of items) expect(await storedCells(i.item_id), i.item_state.name).toEqual(geoCells(i.item_locations));
    expect(await storedCells(placeless.item_id)).toEqual([]);
    expect(await storedCells(twin.item_id)).toHaveLength(6);
    // The SQL function against the TypeScript one: edges of every level, their neighbours in
    // float8, the ends of the ranges, duplicates, sums that round (0.1 + 0.2), and random points.
    const next = (x: number, up: boolean) => { const b = new Float64Array([x]); const v = new BigInt64Array(b.buffer);
      v[0] += (x >= 0) === up ? 1n : -1n; return b[0]; };
    const cases: Location[][] = [[], [{ lat: -90, lng: -180 }], [{ lat: 90, lng: 180 }], [{ lat: 0, lng: 0 }],
      [{ lat: 0.1 + 0.2, lng: -(0.1 + 0.2) }], [{ lat: 29.75, lng: 76.25 }, { lat: 29.75, lng: 76.25 }, { lat: 29.7, lng: 76.2 }]];
    for (const { size } of CELL_LEVELS) {
      for (const x of [3 * size, -5 * size, 17 * size, 90 - size, -90 + size]) {
        cases.push([{ lat: x, lng: 2 * x }], [{ lat: next(x, false), lng: next(2 * x, false) }], [{ lat: next(x, true), lng: next(2 * x, true) }]);
      }
    }
    for (let n = 0; n < 200; n++) cases.push([{ lat: Math.random() * 180 - 90, lng: Math.random() * 360 - 180 }]);
    const { rows } = await platform.ctx.pool.query<{ c: number[] }>(
      `SELECT search.geo_cells(l) AS c FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS e(l, n) ORDER BY n`, [JSON.stringify(cases)]);
    rows.forEach((r, n) => expect(r.c, JSON.stringify(cases[n])).toEqual(geoCells(cases[n])));
  });

  it('covers a box with the cells of every location inside it, at the finest level within the limit', () => {
    const box = { minLat: 29.75, maxLat: 30, minLng: 76.25, maxLng: 76.5 };
    const cover = new Set(coverCells(box)!);
    // Corners and edges of the box: on cell edges at every level.
    for (const lat of [box.minLat, box.maxLat]) for (const lng of [box.minLng, box.maxLng, 76.3]) {
      for (const c of geoCells([{ lat, lng }]).filter((c) => Math.floor(c / 1e8) === 3)) expect(cover.has(c), `${lat},${lng}`).toBe(true);
    }
    expect(cover.size).toBe(5 * 5); // 1/16°: rows and columns 29.75..30 and 76.25..76.5, edges included
    for (let n = 0; n < 2000; n++) {
      const centre = { lat: Math.random() * 160 - 80, lng: Math.random() * 340 - 170 };
      const b = boundingBox(centre, Math.random() * 300_000);
      const cells = coverCells(b);
      if (!cells) continue;
      expect(cells.length).toBeLessThanOrEqual(MAX_COVER_CELLS);
      const set = new Set(cells);
      for (const lat of [b.minLat, b.maxLat, b.minLat + Math.random() * (b.maxLat - b.minLat)]) {
        for (const lng of [b.minLng, b.maxLng, b.minLng + Math.random() * (b.maxLng - b.minLng)]) {
          expect(geoCells([{ lat, lng }]).some((c) => set.has(c)), JSON.stringify({ b, lat, lng })).toBe(true);
        }
      }
    }
    // A circle whose box crosses the antimeridian or reaches a pole: every longitude, no cells.
    expect(coverCells(boundingBox({ lat: -16.8, lng: 179.95 }, 20_000))).toBeUndefined();
    expect(coverCells(boundingBox({ lat: 89.9, lng: 0 }, 20_000))).toBeUndefined();
    // Too many cells at every level: none.
    expect(coverCells({ minLat: -60, maxLat: 60, minLng: -100, maxLng: 100 })).toBeUndefined();
  });

  it('answers a text search within a place alike whichever way it reads the matches', async () => {
    const kaithal = await sameEveryWay({ textSearch: 'dairy', spatial: [near(29.7, 76.3, 20_000)] }, { limit: 100 });
    expect(ids(kaithal)).toEqual(expect.arrayContaining([edge.item_id, twin.item_id]));
    expect(ids(kaithal)).not.toContain(placeless.item_id);
    // The edge item, with circles whose boxes end near its cell edges.
    for (const [lat, lng] of [[29.75, 76.25], [29.7, 76.2], [29.8, 76.3]]) {
      const m = await sameEveryWay({ textSearch: 'edge dairy', spatial: [near(lat, lng, 8_000)] });
      expect(ids(m), `${lat},${lng}`).toContain(edge.item_id);
    }
    // The twin's second location, far from the first.
    const second = await sameEveryWay({ textSearch: 'twin dairy', spatial: [near(31.1, 77.2, 5_000)] });
    expect(ids(second)).toEqual([twin.item_id]);
    // Across the antimeridian and by the pole (no cells: the cost model's read).
    const across = await sameEveryWay({ textSearch: 'dateline dairy', spatial: [near(-16.8, 179.95, 20_000)] });
    expect(ids(across).sort()).toEqual(dateline.map((d) => d.item_id).sort());
    const pole = await sameEveryWay({ textSearch: 'polar dairy', spatial: [near(89.9, 0, 20_000)] });
    expect(ids(pole)).toEqual([polar.item_id]);
    // With a filter and a second place, in nearest order, and a total past the exact bound.
    await sameEveryWay({ textSearch: 'dairy', filters: [{ op: 'neq', target: 'item_state.category', value: 'Medical' }],
      spatial: [near(29.7, 76.3, 30_000), near(29.6, 76.2, 25_000)], sort: 'nearest' }, { limit: 7, offset: 2 });
    const bounded = await runSearch(createSearchEngine({ ...parts, placeRead: 'cells', totalExactBound: 3 }),
      body({ textSearch: 'dairy', spatial: [near(29.7, 76.3, 20_000)] }));
    expect(bounded.message.meta.total_estimated).toBe(true);
  });

  it('moves an item\'s cells with its locations when it is indexed again', async () => {
    const moved = { ...twin, item_locations: [{ lat: 30.5, lng: 75.5 }] };
    expect((await request(platform.url('signals')).put(`/api/v1/items/${twin.item_id}`).set('x-api-key', signalsKey).send(moved)).status).toBe(200);
    await until('the move to be indexed', async () => JSON.stringify(await storedCells(twin.item_id)) === JSON.stringify(geoCells(moved.item_locations)));
    expect(ids(await sameEveryWay({ textSearch: 'twin dairy', spatial: [near(31.1, 77.2, 5_000)] }))).toEqual([]);
    expect(ids(await sameEveryWay({ textSearch: 'twin dairy', spatial: [near(30.5, 75.5, 5_000)] }))).toEqual([twin.item_id]);
  });
});
