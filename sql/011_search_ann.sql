-- Search at scale (issue 14): one stored copy of each embedding, a key and a change cursor for the
-- in-process vector index, and a trigram index serving lexical text matching.

-- One copy of each embedding: the real[] column. The exact backend's cube chunks and pgvector's
-- generated vector column go (with the HNSW indexes on the latter); pgvector now indexes the
-- expression `embedding::vector(n)` (lib/search/vector-backend.ts).
ALTER TABLE search.items DROP COLUMN IF EXISTS embedding_cubes;
DROP FUNCTION IF EXISTS search.cube_chunks(real[]);
ALTER TABLE search.items DROP COLUMN IF EXISTS embedding_vector;
-- Without pgvector the search service keeps an in-process HNSW index (usearch) instead of exact SQL.
UPDATE search.settings SET value = 'usearch', updated_at = now() WHERE key = 'vector_backend' AND value = 'exact';

-- The in-process index's key of each item (usearch keys are 64-bit integers), fixed for the item's
-- life, and a change cursor: every write of a row takes the next change_seq, every deletion leaves
-- its key and the next change_seq in search.ann_removals. A search process catches up by reading
-- both past the cursor it last applied.
CREATE SEQUENCE search.item_change_seq;
ALTER TABLE search.items
  ADD COLUMN ann_key bigint GENERATED ALWAYS AS IDENTITY,
  ADD COLUMN change_seq bigint NOT NULL DEFAULT nextval('search.item_change_seq');
CREATE UNIQUE INDEX items_ann_key_idx ON search.items (ann_key);
CREATE INDEX items_change_seq_idx ON search.items (change_seq);

CREATE TABLE search.ann_removals (
  change_seq bigint PRIMARY KEY DEFAULT nextval('search.item_change_seq'),
  ann_key    bigint NOT NULL,
  removed_at timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION search.items_touch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.change_seq := nextval('search.item_change_seq');
  RETURN NEW;
END
$$;
CREATE TRIGGER items_touch BEFORE UPDATE ON search.items FOR EACH ROW EXECUTE FUNCTION search.items_touch();

CREATE FUNCTION search.items_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO search.ann_removals (ann_key) SELECT ann_key FROM removed;
  RETURN NULL;
END
$$;
CREATE TRIGGER items_removed AFTER DELETE ON search.items REFERENCING OLD TABLE AS removed
  FOR EACH STATEMENT EXECUTE FUNCTION search.items_removed();

-- Identifies this database's index for the index files: a file made from another database (or
-- before a restore) is never loaded.
INSERT INTO search.settings (key, value) VALUES ('ann_epoch', md5(random()::text || clock_timestamp()::text))
  ON CONFLICT (key) DO NOTHING;

-- Lexical matching of textSearch (lib/search/query.ts): every word of the text is a word of the
-- searchable text (full-text match, `simple` configuration: lower-cased, no stemming, any
-- language), served by a GIN index on live rows. ANALYZE keeps the index expression's lexeme
-- statistics, from which the planner estimates totals past the exact bound.
CREATE INDEX items_search_text_fts_idx ON search.items USING gin (to_tsvector('simple', search_text)) WHERE lifecycle_status = 'live';

-- Structured filters (`eq` and `in` on scalar fields are written as containment, lib/search/
-- filters.ts): a GIN index on the live rows' state, so a selective filter is found without a scan.
CREATE INDEX items_state_gin_idx ON search.items USING gin (item_state jsonb_path_ops) WHERE lifecycle_status = 'live';
