/** Geography of item locations, shared by search and discover: WGS84 points and the bounding box around a distance. */

/** Mean Earth radius in metres, the same as search.distance_m (sql/004_search_index.sql). */
export const EARTH_RADIUS_M = 6_371_008.8;

export interface GeoPoint {
  lat: number;
  lng: number;
}

/** The point of a GeoJSON Point's coordinates `[lng, lat, …]` (RFC 7946 §3.1.1). */
export function fromCoordinates(coordinates: readonly number[]): GeoPoint {
  return { lng: coordinates[0], lat: coordinates[1] };
}

/**
 * A latitude/longitude box holding every point within `meters` of `centre` on the sphere
 * (J. P. Matuschek, "Finding Points Within a Distance of a Latitude/Longitude Using Bounding
 * Coordinates"): longitudes are unbounded when the circle reaches a pole or crosses the antimeridian.
 */
export function boundingBox(centre: GeoPoint, meters: number): { minLat: number; maxLat: number; minLng: number; maxLng: number } {
  const r = (meters * 1.0001) / EARTH_RADIUS_M; // a hair wider: the exact test follows
  const lat = (centre.lat * Math.PI) / 180;
  const minLat = lat - r;
  const maxLat = lat + r;
  const deg = (x: number) => (x * 180) / Math.PI;
  if (minLat <= -Math.PI / 2 || maxLat >= Math.PI / 2) {
    return { minLat: Math.max(-90, deg(minLat)), maxLat: Math.min(90, deg(maxLat)), minLng: -180, maxLng: 180 };
  }
  const dLng = deg(Math.asin(Math.min(1, Math.sin(r) / Math.cos(lat))));
  const minLng = centre.lng - dLng;
  const maxLng = centre.lng + dLng;
  if (minLng < -180 || maxLng > 180) return { minLat: deg(minLat), maxLat: deg(maxLat), minLng: -180, maxLng: 180 };
  return { minLat: deg(minLat), maxLat: deg(maxLat), minLng, maxLng };
}
