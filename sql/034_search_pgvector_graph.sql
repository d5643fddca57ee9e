-- The server path's vector index (issue 31, docs/decisions.md "Self-hosting II"): pgvector's HNSW
-- graph is no longer kept in step with every write. Adding a row to the graph as it is written cost
-- ~0.75 ms of PostgreSQL per row (a 267k-row upload: 713-863 rows/s), building the graph in one go
-- about half that per row, in parallel. So each row carries the generation of the graph it belongs
-- to, `ann_gen`, and each HNSW index covers the rows up to its generation:
--   items_embedding_hnsw_h<n>_g<G> ... WHERE model_dimensions = n AND lifecycle_status = 'live' AND ann_gen <= G
-- Every write gives the row the tail generation (search.settings `ann_tail_gen`, > G), which no
-- index covers: the write adds nothing to the graph. A search reads the graph through the index
-- and the tail (rows with ann_gen > G, few) exactly. The search service merges the tail into the
-- graph in the background (lib/search/pgvector-graph.ts): a few rows by giving them generation G
-- (PostgreSQL then adds each to the index), many by building generation G + 1 over every row
-- (CREATE INDEX CONCURRENTLY), after which the index of G is dropped. The generations' numbers
-- only grow, so a search planned with an older G is still served by the newer index (ann_gen <= G
-- implies ann_gen <= G + 1).
-- The usearch backend keeps the column (the writes are the same) and ignores it.

-- Rows written before this migration form the first tail: the search service builds generation 1
-- from them (on the pgvector backend; the HNSW indexes without a generation go below).
ALTER TABLE search.items ADD COLUMN ann_gen integer NOT NULL DEFAULT 1;

INSERT INTO search.settings (key, value) VALUES ('ann_graph_gen', '0'), ('ann_tail_gen', '1') ON CONFLICT (key) DO NOTHING;

-- The tail generation, for writes (the indexer) and any other INSERT (the column's default).
CREATE FUNCTION search.ann_tail_gen() RETURNS integer LANGUAGE sql STABLE PARALLEL SAFE AS
  $$ SELECT coalesce((SELECT value::integer FROM search.settings WHERE key = 'ann_tail_gen'), 1) $$;
ALTER TABLE search.items ALTER COLUMN ann_gen SET DEFAULT search.ann_tail_gen();

DO $$
DECLARE
  idx record;
BEGIN
  IF (SELECT value FROM search.settings WHERE key = 'vector_backend') = 'pgvector' THEN
    -- The tail's rows, found by a range scan (ann_gen > G).
    CREATE INDEX items_ann_gen_idx ON search.items (ann_gen);
    -- The indexes kept in step with every write (lib/search/vector-backend.ts before issue 31).
    FOR idx IN SELECT indexname FROM pg_indexes WHERE schemaname = 'search' AND tablename = 'items'
                 AND indexname ~ '^items_embedding_hnsw_h[0-9]+$' LOOP
      EXECUTE format('DROP INDEX search.%I', idx.indexname);
    END LOOP;
  END IF;
END
$$;
