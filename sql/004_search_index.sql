-- The search service's index (schema `search`): one row per indexed item with its record, its
-- searchable text, the embedding and the model version that produced it. Rows are written only by
-- the search-index-items and search-reconcile tasks, from snapshots sent by signals; the search
-- service never reads the signals schema.

-- Settings of the search service, e.g. `vector_backend` (decided below, once, at migration time)
-- and `reconcile_cursor` (high-water mark of signals' change feed).
CREATE TABLE search.settings (
  key        text PRIMARY KEY,
  value      text NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE search.items (
  item_id            uuid PRIMARY KEY,
  item_network       text NOT NULL,
  item_domain        text NOT NULL,
  item_type          text NOT NULL,
  item_state         jsonb NOT NULL,
  item_locations     jsonb NOT NULL DEFAULT '[]',
  item_instance_url  text,
  item_schema_url    text,
  created_by         text,
  created_at         timestamptz NOT NULL,
  -- The item's updated_at at signals: a snapshot older than this is never applied.
  source_updated_at  timestamptz NOT NULL,
  -- draft, live or paused (retired items leave the index); search returns live items only.
  lifecycle_status   text NOT NULL CHECK (lifecycle_status IN ('draft', 'live', 'paused')),
  -- The embedded text: `label: value` lines of the fields the network marks x-vectorize.
  search_text        text NOT NULL,
  -- SHA-256 (hex) of search_text: unchanged text under the same model version is not re-embedded.
  content_hash       text NOT NULL,
  model_id           text NOT NULL,
  model_quantization text NOT NULL,
  model_dimensions   integer NOT NULL CHECK (model_dimensions > 0),
  -- Unit-length embedding (cosine similarity = dot product).
  embedding          real[] NOT NULL CHECK (cardinality(embedding) = model_dimensions),
  -- When the row was last written from a snapshot, and when its embedding was last computed.
  indexed_at         timestamptz NOT NULL DEFAULT now(),
  embedded_at        timestamptz NOT NULL DEFAULT now()
);
-- Vectors do not compress: they are never offered to pglz (writes 3-4x faster, measured), and a
-- row stays whole in its page up to the largest target, so that a search reads each vector
-- without a TOAST fetch per use (searches 3x faster, measured). Rows larger than that (models
-- with many dimensions) keep their vectors out of line, uncompressed.
ALTER TABLE search.items SET (toast_tuple_target = 8160);
ALTER TABLE search.items ALTER COLUMN embedding SET STORAGE EXTERNAL;
-- newest order within a search scope, and the scope itself.
CREATE INDEX items_scope_created_idx ON search.items (item_network, item_domain, item_type, lifecycle_status, created_at DESC, item_id);

-- One row per location of an item, for the spatial filter's bounding-box prefilter (GiST on the
-- built-in point type: x = longitude, y = latitude) and the distance to an item's nearest location.
CREATE TABLE search.item_locations (
  item_id  uuid NOT NULL REFERENCES search.items (item_id) ON DELETE CASCADE,
  position integer NOT NULL,
  lat      double precision NOT NULL CHECK (lat BETWEEN -90 AND 90),
  lng      double precision NOT NULL CHECK (lng BETWEEN -180 AND 180),
  PRIMARY KEY (item_id, position)
);
CREATE INDEX item_locations_point_idx ON search.item_locations USING gist (point(lng, lat));

-- Great-circle distance in metres between two WGS84 points (haversine, mean Earth radius 6,371,008.8 m).
CREATE FUNCTION search.distance_m(lat1 double precision, lng1 double precision, lat2 double precision, lng2 double precision)
RETURNS double precision LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT 2 * 6371008.8 * asin(least(1, sqrt(
    power(sin(radians(lat2 - lat1) / 2), 2)
    + cos(radians(lat1)) * cos(radians(lat2)) * power(sin(radians(lng2 - lng1) / 2), 2))))
$$;

-- Retired items leave the index; their ids stay here so that an older snapshot arriving late
-- (jobs may run out of order) cannot bring them back. Retirement is final at signals.
CREATE TABLE search.retired_items (
  item_id           uuid PRIMARY KEY,
  source_updated_at timestamptz NOT NULL
);

-- The vector backend, chosen once here and recorded in search.settings:
-- * `pgvector` when the `vector` extension exists or can be created: a generated `embedding_vector`
--   column; a server that has pgvector but whose role may not create it is refused (issue 31);
--   the search service creates an HNSW cosine index per dimension count for its model
--   (lib/search/vector-backend.ts).
-- * `exact` otherwise: exact cosine over the real[] embedding. PostgreSQL has no array dot product,
--   and summing over unnest() costs about 1 s per 20,000 vectors of 384 dimensions, so the vector
--   is also kept as chunks of at most 100 dimensions in the `cube` type (contrib; its limit is 100
--   dimensions), whose C distance gives the dot product of unit vectors: a.b = 1 - |a - b|^2 / 2.
DO $$
BEGIN
  BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector')
       AND EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'vector') THEN
      CREATE EXTENSION vector;
    END IF;
  EXCEPTION WHEN insufficient_privilege THEN
    -- pgvector is there but this role may not create extensions (pgvector is not a trusted
    -- extension): the operator chose a server with pgvector, so its index is used, not a fallback.
    RAISE EXCEPTION 'The search index uses pgvector, which this PostgreSQL server has, but role "%" may not create extensions: an administrator must run CREATE EXTENSION vector; in database "%" first (then start again)', current_user, current_database();
  END;
  IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector') THEN
    ALTER TABLE search.items ADD COLUMN embedding_vector vector GENERATED ALWAYS AS (embedding::vector) STORED;
    INSERT INTO search.settings (key, value) VALUES ('vector_backend', 'pgvector');
  ELSE
    BEGIN
      CREATE EXTENSION IF NOT EXISTS cube;
    EXCEPTION WHEN OTHERS THEN
      RAISE EXCEPTION 'The search index needs the vector extension (pgvector, preferred) or the cube extension (PostgreSQL contrib): %', SQLERRM;
    END;
    EXECUTE $f$
      CREATE FUNCTION search.cube_chunks(v real[]) RETURNS cube[] LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $b$
        SELECT array_agg(cube(v[i:i + 99]::double precision[]) ORDER BY i) FROM generate_series(1, cardinality(v), 100) AS i
      $b$ $f$;
    ALTER TABLE search.items ADD COLUMN embedding_cubes cube[] GENERATED ALWAYS AS (search.cube_chunks(embedding)) STORED;
    ALTER TABLE search.items ALTER COLUMN embedding_cubes SET STORAGE EXTERNAL;
    INSERT INTO search.settings (key, value) VALUES ('vector_backend', 'exact');
  END IF;
END
$$;
