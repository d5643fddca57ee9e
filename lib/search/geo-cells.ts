/**
 * Grid cells of item locations, indexed with the words (sql/019_search_geo_cells.sql,
 * `search.geo_cells`): a text search within a place asks the GIN index for the rows holding its words
 * AND a cell of the place's cover, and reads only those rows (lib/search/query.ts, `placeRows`).
 *
 * A location's cell at level L of size S degrees is
 *   L * 100000000 + floor((lat + 90) / S) * 10000 + floor((lng + 180) / S)
 * for the levels of CELL_LEVELS; every row stores its locations' cells at every level. This file
 * and the SQL function are the one definition: the same IEEE float8 operations in the same order
 * (S a power of two, so only the addition rounds, alike in both).
 */
import type { GeoPoint } from '../network/geo.ts';

/** Levels and cell sizes in degrees, as in sql/019_search_geo_cells.sql. */
export const CELL_LEVELS = [{ level: 1, size: 1 }, { level: 2, size: 0.25 }, { level: 3, size: 0.0625 }] as const;

/** Cells a cover may hold at most: the finest level within it is used (measured, docs/decisions.md 2026-11-25). */
export const MAX_COVER_CELLS = 64;

const row = (lat: number, size: number) => Math.floor((lat + 90) / size);
const column = (lng: number, size: number) => Math.floor((lng + 180) / size);
const cellId = (level: number, r: number, c: number) => level * 100_000_000 + r * 10_000 + c;

/**
 * The cells of `locations` at every level, de-duplicated and sorted: what `search.geo_cells` stores.
 * Search needs only the cover; the tests compare the stored cells with this, i.e. the SQL function
 * with the arithmetic coverCells uses.
 */
export function geoCells(locations: readonly GeoPoint[]): number[] {
  const cells = new Set<number>();
  for (const { lat, lng } of locations) {
    for (const { level, size } of CELL_LEVELS) cells.add(cellId(level, row(lat, size), column(lng, size)));
  }
  return [...cells].sort((a, b) => a - b);
}

/**
 * The cells covering a latitude/longitude box (degrees, as lib/network/geo.ts `boundingBox`
 * gives), at the finest level whose cover has at most `maxCells` cells; undefined when none does
 * or when the box spans every longitude (boundingBox's answer for a circle that crosses the
 * antimeridian or reaches a pole), i.e. when cells cannot narrow the search.
 * Every location inside the box has its cell in the cover: floor((x + 90) / size) is monotonic in
 * x under IEEE rounding, so minLat <= lat <= maxLat bounds the location's row by the box's rows,
 * and likewise for columns.
 */
export function coverCells(box: { minLat: number; maxLat: number; minLng: number; maxLng: number }, maxCells = MAX_COVER_CELLS): number[] | undefined {
  if (box.minLng <= -180 && box.maxLng >= 180) return undefined;
  for (let n = CELL_LEVELS.length - 1; n >= 0; n--) {
    const { level, size } = CELL_LEVELS[n];
    const [r0, r1, c0, c1] = [row(box.minLat, size), row(box.maxLat, size), column(box.minLng, size), column(box.maxLng, size)];
    if ((r1 - r0 + 1) * (c1 - c0 + 1) > maxCells) continue;
    const cells: number[] = [];
    for (let r = r0; r <= r1; r++) for (let c = c0; c <= c1; c++) cells.push(cellId(level, r, c));
    return cells;
  }
  return undefined;
}
