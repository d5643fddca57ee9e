-- The signals item write path, made cheaper for bulk onboarding (issue 17); behaviour unchanged.

-- signals.locations_box (005) is a SQL function whose body is a sub-select, which PostgreSQL never
-- inlines: the GiST index items_live_locations_idx ran it through the SQL-function executor for
-- every live item written (~10 % of the item upsert). Now the body is one CASE expression, which
-- PostgreSQL inlines into the index expression and the queries alike: no location is NULL, one
-- location is its point as a box (nearly every item), and only two or more reach the sub-select,
-- kept in its own function. Same results for every input, so the index built with the old body stays valid.
CREATE FUNCTION signals.locations_box_of_many(locations jsonb) RETURNS box
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
  RETURN (SELECT box(point(min((l ->> 'lng')::float8), min((l ->> 'lat')::float8)),
                     point(max((l ->> 'lng')::float8), max((l ->> 'lat')::float8)))
            FROM jsonb_array_elements(locations) AS l);

-- Not STRICT, so that it can be inlined (a NULL argument still gives NULL: the ELSE branch is strict).
CREATE OR REPLACE FUNCTION signals.locations_box(locations jsonb) RETURNS box
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN CASE jsonb_array_length(locations)
    WHEN 0 THEN NULL::box
    WHEN 1 THEN box(point((locations -> 0 ->> 'lng')::float8, (locations -> 0 ->> 'lat')::float8),
                    point((locations -> 0 ->> 'lng')::float8, (locations -> 0 ->> 'lat')::float8))
    ELSE signals.locations_box_of_many(locations) END;

-- The words of a statement's items, de-duplicated and sorted in the "C" collation of
-- signals.search_words itself (byte order, abbreviated keys) rather than the database's libc
-- collation, which compared every pair through strcoll. Any fixed order keeps concurrent writers
-- from deadlocking; the words stored are the same.
CREATE OR REPLACE FUNCTION signals.collect_search_words() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO signals.search_words (word)
    SELECT DISTINCT w COLLATE "C" FROM changed, unnest(tsvector_to_array(changed.search_words)) AS w ORDER BY 1
    ON CONFLICT DO NOTHING;
  RETURN NULL;
END
$$;
