-- Native discover over signals' own items: the query signals answers from when the search service
-- cannot (POST /api/v1/network/item/discover, source native_fallback). Only live items are ever
-- returned, so every index here is partial on lifecycle_status = 'live'.

-- Misspelling-tolerant matching: trigram similarity between a query word and the known words.
CREATE EXTENSION IF NOT EXISTS pg_trgm;

-- The item's searchable text (lib/search-text.ts: `label: value` lines of its x-vectorize fields),
-- written by upsertItems (lib/items.ts) with every stored change.
ALTER TABLE signals.items ADD COLUMN search_text text NOT NULL DEFAULT '';
-- Items stored before this migration: the values of their state, until their next change rewrites it.
UPDATE signals.items SET search_text = coalesce((
  SELECT string_agg(v #>> '{}', ' ') FROM jsonb_path_query(item_state, 'strict $.**') AS v
   WHERE jsonb_typeof(v) IN ('string', 'number')), '');

-- The words of that text without its labels (the `label: ` line prefixes are not content),
-- lower-cased by the `simple` configuration (no stemming, no stop words, any language);
-- '/', '@', '.', ':' and '_' split words as they do in a query (lib/discover/native.ts textWords).
ALTER TABLE signals.items ADD COLUMN search_words tsvector GENERATED ALWAYS AS (
  to_tsvector('simple', regexp_replace(regexp_replace(search_text, '(^|\n)[^:\n]*: ', '\1', 'g'), '[/@.:_]+', ' ', 'g'))) STORED;

-- Every word that occurs in some item's text, for finding the known words a misspelt query word
-- stands for (the pg_trgm documentation's advice for fuzzy search over large texts). Words are
-- only added: a word no item holds any more matches nothing. Filled by statement-level triggers
-- (one INSERT per statement, words in a fixed order so concurrent writers cannot deadlock).
CREATE TABLE signals.search_words (word text COLLATE "C" PRIMARY KEY);
CREATE INDEX search_words_trgm_idx ON signals.search_words USING gin (word gin_trgm_ops);
INSERT INTO signals.search_words (word)
  SELECT DISTINCT w FROM signals.items, unnest(tsvector_to_array(search_words)) AS w ORDER BY w;

CREATE FUNCTION signals.collect_search_words() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO signals.search_words (word)
    SELECT DISTINCT w FROM changed, unnest(tsvector_to_array(changed.search_words)) AS w ORDER BY w
    ON CONFLICT DO NOTHING;
  RETURN NULL;
END
$$;
CREATE TRIGGER items_search_words_insert AFTER INSERT ON signals.items
  REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION signals.collect_search_words();
CREATE TRIGGER items_search_words_update AFTER UPDATE ON signals.items
  REFERENCING NEW TABLE AS changed FOR EACH STATEMENT EXECUTE FUNCTION signals.collect_search_words();

-- Great-circle distance in metres (haversine on a sphere of the mean Earth radius, 6,371,008.8 m).
-- Not STRICT, so that PostgreSQL inlines it into the query (it is evaluated per row).
CREATE FUNCTION signals.distance_meters(lat1 float8, lng1 float8, lat2 float8, lng2 float8) RETURNS float8
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN 2 * 6371008.8 * asin(least(1, sqrt(
    sin(radians(lat2 - lat1) / 2) ^ 2 + cos(radians(lat1)) * cos(radians(lat2)) * sin(radians(lng2 - lng1) / 2) ^ 2)));

-- Distance in metres from (lat, lng) to the nearest of `locations` (jsonb array of {lat, lng});
-- NULL when there is none.
CREATE FUNCTION signals.nearest_location_meters(locations jsonb, lat float8, lng float8) RETURNS float8
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN (SELECT min(signals.distance_meters(lat, lng, (l ->> 'lat')::float8, (l ->> 'lng')::float8))
            FROM jsonb_array_elements(locations) AS l);

-- The box (x = longitude, y = latitude) around all of `locations`; NULL when there is none.
-- Indexed with GiST so a bounding box or a distance filter reads only the candidates near it.
CREATE FUNCTION signals.locations_box(locations jsonb) RETURNS box
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN (SELECT box(point(min((l ->> 'lng')::float8), min((l ->> 'lat')::float8)),
                     point(max((l ->> 'lng')::float8), max((l ->> 'lat')::float8)))
            FROM jsonb_array_elements(locations) AS l);

-- Whether any of `locations` lies inside the box [min_lat, max_lat] x [min_lng, max_lng].
CREATE FUNCTION signals.any_location_within(locations jsonb, min_lat float8, max_lat float8, min_lng float8, max_lng float8) RETURNS boolean
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN EXISTS (SELECT 1 FROM jsonb_array_elements(locations) AS l
                  WHERE (l ->> 'lat')::float8 BETWEEN min_lat AND max_lat
                    AND (l ->> 'lng')::float8 BETWEEN min_lng AND max_lng);

CREATE INDEX items_live_newest_idx ON signals.items (item_network, item_domain, item_type, created_at DESC, item_id DESC)
  WHERE lifecycle_status = 'live';
CREATE INDEX items_live_search_words_idx ON signals.items USING gin (search_words)
  WHERE lifecycle_status = 'live';
CREATE INDEX items_live_state_idx ON signals.items USING gin (item_state jsonb_path_ops)
  WHERE lifecycle_status = 'live';
CREATE INDEX items_live_locations_idx ON signals.items USING gist (signals.locations_box(item_locations))
  WHERE lifecycle_status = 'live';
