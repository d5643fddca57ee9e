-- Search at scale (issue 14, docs/decisions.md): words and places in one GIN index, so that a text
-- search within a place intersects the text's rows with the place's rows inside the index and reads
-- from the heap only their intersection (before: every text match, or every row near the point,
-- was read and checked; thousands for a common word within a dense 50 km circle).
--
-- A place is written as grid cells: each location's cell at three sizes (level 1: 1°, level 2:
-- 1/4°, level 3: 1/16° of latitude and longitude), numbered by search.geo_cell
--   level * 100000000 + floor((lat + 90) / size) * 10000 + floor((lng + 180) / size)
-- (at most 3 * 10^8 + 2880 * 10^4 + 5760: an int4). lib/search/geo-cells.ts computes the cells
-- covering a search's bounding box with the same float8 arithmetic (the sizes are powers of two, so
-- only the addition rounds, in both). The locations are read as the indexer writes
-- search.item_locations (`(location ->> 'lat')::float8`). No locations: no cells ('{}').
-- search.geo_cell is one expression and search.geo_cells one CASE, both inlined by PostgreSQL, so
-- an item with one location (every item of the PMGSY file) gets its three cells without the
-- SQL-function executor (~2 µs a row against ~9 for the sub-select, measured on the full file);
-- only two or more locations reach the sub-select (sorted and de-duplicated), as in
-- signals.locations_box (016). One location's cells are already sorted: the level leads.
CREATE FUNCTION search.geo_cell(level int, size float8, lat float8, lng float8) RETURNS int
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN level * 100000000 + floor((lat + 90) / size)::int * 10000 + floor((lng + 180) / size)::int;

CREATE FUNCTION search.geo_cells_of_many(locations jsonb) RETURNS int[]
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN (SELECT coalesce(array_agg(DISTINCT c.cell ORDER BY c.cell), '{}')
            FROM (SELECT (e ->> 'lat')::float8 AS lat, (e ->> 'lng')::float8 AS lng FROM jsonb_array_elements(locations) AS e) l,
                 (VALUES (1, 1::float8), (2, 0.25::float8), (3, 0.0625::float8)) AS s(level, size),
                 LATERAL (SELECT search.geo_cell(s.level, s.size, l.lat, l.lng) AS cell) c);

-- Not STRICT, so that it can be inlined (item_locations is never NULL).
CREATE FUNCTION search.geo_cells(locations jsonb) RETURNS int[]
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN CASE jsonb_array_length(locations)
    WHEN 0 THEN '{}'::int[]
    WHEN 1 THEN ARRAY[search.geo_cell(1, 1, (locations -> 0 ->> 'lat')::float8, (locations -> 0 ->> 'lng')::float8),
                      search.geo_cell(2, 0.25, (locations -> 0 ->> 'lat')::float8, (locations -> 0 ->> 'lng')::float8),
                      search.geo_cell(3, 0.0625, (locations -> 0 ->> 'lat')::float8, (locations -> 0 ->> 'lng')::float8)]
    ELSE search.geo_cells_of_many(locations) END;

-- Stored, so the indexer's writes recompute it with the locations (no change to its statements).
-- Rewrites search.items (docs/operations.md, "Upgrading").
ALTER TABLE search.items ADD COLUMN geo_cells int[] GENERATED ALWAYS AS (search.geo_cells(item_locations)) STORED;

-- One GIN index on words and cells in place of 017's words alone: it serves `search_words @@ q`
-- alone as before, and `search_words @@ q AND geo_cells && cover` as one intersection.
DROP INDEX search.items_search_words_idx;
CREATE INDEX items_search_words_cells_idx ON search.items USING gin (search_words, geo_cells) WHERE lifecycle_status = 'live';
ANALYZE search.items;
