-- Bulk onboarding III (issue 30): keeping a list current by upload. Upload modes (create, upsert,
-- update), a content hash per participant so that an unchanged row costs a read and no write, the
-- change history, and sync: pausing the participants a whole-list file no longer holds.
-- docs/decisions.md "Bulk onboarding III".

-- content_hash: HMAC (the PII blind-index key) of the participant's canonical profile
-- (lib/aggregator/bulk/upsert.ts `contentHash`); NULL for participants stored before this
-- migration, which an upsert compares field by field instead.
-- paused_by_upload_id: the sync upload that paused the participant; a later upload that holds it
-- again makes it live again. Pauses made by anyone else are left alone.
ALTER TABLE aggregator.participants
  ADD COLUMN content_hash bytea,
  ADD COLUMN paused_by_upload_id uuid;

ALTER TABLE aggregator.bulk_uploads
  ADD COLUMN mode text NOT NULL DEFAULT 'create' CHECK (mode IN ('create', 'upsert', 'update')),
  ADD COLUMN sync boolean NOT NULL DEFAULT false,
  -- passed = created + updated + unchanged (the spec's contract); the three are ours.
  ADD COLUMN created integer NOT NULL DEFAULT 0,
  ADD COLUMN updated integer NOT NULL DEFAULT 0,
  ADD COLUMN unchanged integer NOT NULL DEFAULT 0,
  -- Sync: the count the operator confirmed at start (from the dry run), the count found when the
  -- file was staged, and the count paused once the rows were done.
  ADD COLUMN confirm_pause integer,
  ADD COLUMN allow_large_pause boolean NOT NULL DEFAULT false,
  ADD COLUMN to_pause integer,
  ADD COLUMN paused integer NOT NULL DEFAULT 0,
  ADD CONSTRAINT bulk_uploads_sync_upsert CHECK (NOT sync OR mode = 'upsert');

ALTER TABLE aggregator.bulk_upload_chunks
  ADD COLUMN created integer,
  ADD COLUMN updated integer,
  ADD COLUMN unchanged integer;

-- A saved mapping's default mode for the uploads that use it.
ALTER TABLE aggregator.bulk_mappings
  ADD COLUMN mode text NOT NULL DEFAULT 'create' CHECK (mode IN ('create', 'upsert', 'update'));

-- The dry run of an upsert, update or sync job reads the whole file: its counts (and, for sync,
-- the count to pause, which the start compares with confirm_pause) are kept in the clear beside
-- the sealed result, since the start reads them.
ALTER TABLE aggregator.bulk_upload_previews
  ADD COLUMN whole_file boolean NOT NULL DEFAULT false,
  ADD COLUMN pause_count integer;

-- The history of changes bulk uploads made to participants: which fields changed (names only,
-- never values), by which upload and row, and when. `kind`: updated (fields changed by a row),
-- paused (left out of a sync upload's file), resumed (held again by a later upload). A row is
-- written per changed participant (99,000 in one upload of a list wholly changed), so it carries
-- no foreign keys (a check per row, ~13 % of the update's database time) and two indexes: an
-- entry names its participant and upload by id, and outlives neither harmfully (it holds no value).
CREATE TABLE aggregator.participant_changes (
  change_id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  participant_id uuid NOT NULL,
  aggregator_id  uuid NOT NULL,
  upload_id      uuid,
  row_number     integer,
  kind           text NOT NULL CHECK (kind IN ('updated', 'paused', 'resumed')),
  changed_fields text[] NOT NULL,
  changed_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX participant_changes_upload_idx ON aggregator.participant_changes (upload_id, row_number);
CREATE INDEX participant_changes_participant_idx ON aggregator.participant_changes (participant_id, changed_at);

-- Sync: the participants a staged sync upload will pause once its rows are done (found when the
-- file is staged); done_at marks those already paused, so a retried finish pauses each once.
CREATE TABLE aggregator.bulk_upload_pauses (
  upload_id      uuid NOT NULL REFERENCES aggregator.bulk_uploads (upload_id) ON DELETE CASCADE,
  participant_id uuid NOT NULL REFERENCES aggregator.participants (participant_id) ON DELETE CASCADE,
  done_at        timestamptz,
  PRIMARY KEY (upload_id, participant_id)
);

-- Uploads before this migration were create uploads: every row they passed created its participant.
UPDATE aggregator.bulk_uploads SET created = passed;
UPDATE aggregator.bulk_upload_chunks SET created = passed, updated = 0, unchanged = 0 WHERE done_at IS NOT NULL;
