-- Search at scale (issue 14), storage: each embedding stored once as 16-bit floats (half of the
-- real[] it was), so that a row of search.items stays under 2 KB at 384 dimensions (rows were
-- 2,243 bytes, three per 8 KB page; now five per page).
-- * pgvector backend: the `halfvec` type (pgvector >= 0.7); the HNSW indexes become
--   `embedding::halfvec(n)` expression indexes (lib/search/vector-backend.ts recreates them).
-- * usearch backend (no pgvector): `bytea` of n big-endian IEEE 754 binary16 values, the layout
--   pgvector's halfvec_send uses after its 4-byte header.
-- Two functions read either form the same way (both inlined by the planner):
--   search.embedding_f16(embedding)   -> bytea, n big-endian binary16 values (what the search
--                                        service decodes: lib/search/half.ts);
--   search.embedding_array(embedding) -> real[] (for the few single-item readers).
-- search.f16_of(real[]) converts an array the way lib/search/half.ts does (round to nearest, ties
-- to even); it migrates the existing rows here and serves SQL that writes a real[] (tests).

CREATE FUNCTION search.f16_of(v real[]) RETURNS bytea LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT coalesce(string_agg(int2send((CASE WHEN h >= 32768 THEN h - 65536 ELSE h END)::int2), ''::bytea ORDER BY n), ''::bytea)
    FROM (
      SELECT n, s
        + CASE
            WHEN a = 0 THEN 0
            WHEN a >= 65520 THEN 31744                                   -- beyond the largest half: infinity
            WHEN a < 2 ^ -14 THEN round(a * 2 ^ 24)::int                 -- subnormal (a carry gives the smallest normal)
            ELSE ((e + 15) * 1024 + round((a / 2 ^ e - 1) * 1024))::int  -- a mantissa carry moves to the next exponent
          END AS h
        FROM (
          SELECT n, s, a, CASE WHEN a = 0 OR a < 2 ^ -14 THEN 0
                            WHEN a < 2 ^ g THEN g - 1 WHEN a >= 2 ^ (g + 1) THEN g + 1 ELSE g END AS e
            FROM (SELECT n, CASE WHEN x < 0 OR (x = 0 AND x::text LIKE '-%') THEN 32768 ELSE 0 END AS s, abs(x::float8) AS a, CASE WHEN x = 0 THEN 0 ELSE floor(ln(abs(x::float8)) / ln(2)) END AS g
                    FROM unnest(v) WITH ORDINALITY AS u(x, n)) elements
        ) exponents
    ) bits
$$;

DO $$
DECLARE
  backend text := (SELECT value FROM search.settings WHERE key = 'vector_backend');
  idx record;
BEGIN
  -- The real[] length check (004; named by PostgreSQL) goes with the type.
  FOR idx IN SELECT conname FROM pg_constraint WHERE conrelid = 'search.items'::regclass AND contype = 'c'
               AND pg_get_constraintdef(oid) LIKE '%cardinality(embedding)%' LOOP
    EXECUTE format('ALTER TABLE search.items DROP CONSTRAINT %I', idx.conname);
  END LOOP;
  IF backend = 'pgvector' THEN
    -- The real[] HNSW expression indexes go; vector-backend.ts creates the halfvec ones at start.
    FOR idx IN SELECT indexname FROM pg_indexes WHERE schemaname = 'search' AND tablename = 'items' AND indexname LIKE 'items_embedding_hnsw_%' LOOP
      EXECUTE format('DROP INDEX search.%I', idx.indexname);
    END LOOP;
    ALTER TABLE search.items ALTER COLUMN embedding TYPE halfvec USING embedding::halfvec;
    ALTER TABLE search.items ADD CONSTRAINT items_embedding_check CHECK (vector_dims(embedding) = model_dimensions);
    EXECUTE $f$ CREATE FUNCTION search.embedding_f16(e halfvec) RETURNS bytea LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
      AS 'SELECT substring(halfvec_send(e) FROM 5)' $f$;
    EXECUTE $f$ CREATE FUNCTION search.embedding_array(e halfvec) RETURNS real[] LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
      AS 'SELECT e::real[]' $f$;
    EXECUTE $f$ CREATE FUNCTION search.embedding_of(v real[]) RETURNS halfvec LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
      AS 'SELECT v::halfvec' $f$;
  ELSE
    ALTER TABLE search.items ALTER COLUMN embedding TYPE bytea USING search.f16_of(embedding);
    ALTER TABLE search.items ADD CONSTRAINT items_embedding_check CHECK (length(embedding) = 2 * model_dimensions);
    CREATE FUNCTION search.embedding_f16(e bytea) RETURNS bytea LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS 'SELECT e';
    -- binary16 to float: sign, then 2^(exponent - 15) * (1 + mantissa / 1024), or mantissa * 2^-24 when subnormal.
    CREATE FUNCTION search.embedding_array(e bytea) RETURNS real[] LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $b$
      SELECT coalesce(array_agg((CASE WHEN h >= 32768 THEN -1 ELSE 1 END) * CASE
               WHEN (h >> 10) & 31 = 0 THEN (h & 1023) * 2 ^ -24
               WHEN (h >> 10) & 31 = 31 THEN 'Infinity'::float8
               ELSE 2 ^ (((h >> 10) & 31) - 15) * (1 + (h & 1023) / 1024.0) END ORDER BY n)::real[], '{}')
        FROM (SELECT n, get_byte(e, 2 * n) * 256 + get_byte(e, 2 * n + 1) AS h FROM generate_series(0, length(e) / 2 - 1) AS n) s
    $b$;
    CREATE FUNCTION search.embedding_of(v real[]) RETURNS bytea LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS 'SELECT search.f16_of(v)';
  END IF;
END
$$;
ALTER TABLE search.items ALTER COLUMN embedding SET STORAGE EXTERNAL;

-- Statistics of the full-text expression: the GIN index on it is partial (live rows), and the
-- planner takes no statistics from a partial index's expressions, so it guessed any text's matches
-- (1,335 for "school", which has 29,870; 1-7 for common word pairs with thousands). With these
-- it estimates single words closely (30,844) and so can skip counting them (lib/search/query.ts,
-- countRows) and order the joins of combined searches by what is selective.
CREATE STATISTICS search.items_search_text_fts_stats ON (to_tsvector('simple', search_text)) FROM search.items;
ANALYZE search.items;
