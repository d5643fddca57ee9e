-- Issue 30 (an upsert's speed): room on each page of aggregator.participants for a new version of
-- its rows. An upsert changes no indexed column (keys and blind indexes keep their values), so with
-- space on the page an update is a HOT update, written into no index. At the default (100) the
-- pages an upload fills are full, and each update of a wholly changed list inserted into every
-- index of the table; the table reaches about this size after its first such upload anyway (the
-- new versions on new pages). Applies to pages written from now on (existing pages are not rewritten).
ALTER TABLE aggregator.participants SET (fillfactor = 50);
