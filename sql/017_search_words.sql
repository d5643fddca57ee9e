-- Search at scale (issue 14, docs/decisions.md): the searchable text is stored as its words, a
-- tsvector without positions (`strip(to_tsvector('simple', text))`), instead of the text itself.
-- A text search's lexical condition (every word of the query is a word of the item) is then
-- `search_words @@ query`, which compares sorted lexemes: the text no longer goes through the
-- full-text parser for every row a statement checks (the candidates of the vector index, the rows
-- near a point), ~20 µs a row. Matching is unchanged (the same words; positions were never used).
-- The column's own statistics (most common words) replace those of the expression, and the GIN
-- index is on the column. Rows stay the same size (~180 B of words for ~140 B of text: five rows per page).
DROP STATISTICS IF EXISTS search.items_search_text_fts_stats;
DROP INDEX IF EXISTS search.items_search_text_fts_idx;
ALTER TABLE search.items ALTER COLUMN search_text TYPE tsvector USING strip(to_tsvector('simple', search_text));
ALTER TABLE search.items RENAME COLUMN search_text TO search_words;
CREATE INDEX items_search_words_idx ON search.items USING gin (search_words) WHERE lifecycle_status = 'live';
ANALYZE search.items;
