-- Issue 31 (indexing speed): the indexer writes each row's grid cells (lib/search/geo-cells.ts
-- `geoCells`, the same arithmetic as search.geo_cells, which the tests compare). As a generated
-- column PostgreSQL computed them per written row from the jsonb locations: six jsonb lookups and
-- float parses, ~19 µs of its CPU a row, about a tenth of an indexed row's. Stored values stay;
-- search.geo_cells stays as their SQL definition. A row written without cells has none ('{}'), as a
-- row without locations.
ALTER TABLE search.items ALTER COLUMN geo_cells DROP EXPRESSION;
ALTER TABLE search.items ALTER COLUMN geo_cells SET DEFAULT '{}';
ALTER TABLE search.items ALTER COLUMN geo_cells SET NOT NULL;
