-- Bulk onboarding (aggregator schema): participants, bulk-upload jobs, their staged chunks and the
-- outcome of every row that was not onboarded. Status values and moves: docs/decisions.md,
-- "Bulk onboarding".

-- Participants onboarded by an aggregator. participant_id is also the item_id of the item pushed
-- to signals. Identity fields are encrypted (AES-256-GCM, lib/crypto.ts); duplicates are found
-- through HMAC blind indexes of the E.164 phone and the lower-cased e-mail, unique per aggregator,
-- and through the operator's external id, unique per aggregator and domain (DESIGN.md data rules).
CREATE TABLE aggregator.participants (
  participant_id   uuid PRIMARY KEY,
  aggregator_id    uuid NOT NULL REFERENCES aggregator.aggregators (aggregator_id),
  org_id           uuid NOT NULL REFERENCES aggregator.organisations (org_id),
  domain           text NOT NULL,
  item_type        text NOT NULL,
  name_encrypted   text,
  phone_encrypted  text,
  email_encrypted  text,
  phone_index      bytea,
  email_index      bytea,
  external_id      text,
  -- Every other field of the participant schema (private ones included), typed per schema.
  profile          jsonb NOT NULL,
  locations        jsonb NOT NULL DEFAULT '[]',
  -- As signals answered the push (its go-live rules); NULL until pushed.
  lifecycle_status text CHECK (lifecycle_status IN ('draft', 'live', 'paused', 'retired')),
  pushed_at        timestamptz,
  -- Where a bulk-onboarded participant came from (spreadsheet row number, header = 1).
  bulk_upload_id   uuid,
  row_number       integer,
  created_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz NOT NULL DEFAULT now()
);
-- Partial indexes: most rows lack one of these keys, and NULLs need no index entry.
CREATE UNIQUE INDEX participants_phone_uq ON aggregator.participants (aggregator_id, phone_index) WHERE phone_index IS NOT NULL;
CREATE UNIQUE INDEX participants_email_uq ON aggregator.participants (aggregator_id, email_index) WHERE email_index IS NOT NULL;
CREATE UNIQUE INDEX participants_external_id_uq ON aggregator.participants (aggregator_id, domain, external_id) WHERE external_id IS NOT NULL;

-- Bulk-upload jobs (spec "Bulk-upload job"): the stored file, who attested and when, progress
-- counters read in O(1) while the job runs (updated once per chunk).
CREATE TABLE aggregator.bulk_uploads (
  upload_id             uuid PRIMARY KEY,
  aggregator_id         uuid NOT NULL REFERENCES aggregator.aggregators (aggregator_id),
  org_id                uuid NOT NULL REFERENCES aggregator.organisations (org_id),
  participant_type      text NOT NULL,
  schema_id             text NOT NULL,
  schema_version        text NOT NULL,
  status                text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'running', 'completed', 'failed')),
  status_reason         text,
  file_name             text,
  file_format           text NOT NULL CHECK (file_format IN ('csv', 'xlsx')),
  file_size_bytes       bigint NOT NULL,
  file_object_key       text NOT NULL,
  -- File header → schema field (or null: ignore the column), as given at creation.
  column_map            jsonb,
  created_by            text NOT NULL,
  attested_by           text,
  attested_at           timestamptz,
  started_at            timestamptz,
  -- Set by staging: the header row, how the file was read, how many rows and chunks.
  headers               text[],
  encoding              text,
  sheet                 text,
  staged_at             timestamptz,
  total_rows            integer,
  chunk_count           integer,
  chunks_done           integer NOT NULL DEFAULT 0,
  passed                integer NOT NULL DEFAULT 0,
  failed                integer NOT NULL DEFAULT 0,
  skipped               integer NOT NULL DEFAULT 0,
  errors_csv_object_key text,
  created_at            timestamptz NOT NULL DEFAULT now(),
  updated_at            timestamptz NOT NULL DEFAULT now(),
  completed_at          timestamptz
);
CREATE INDEX bulk_uploads_aggregator_idx ON aggregator.bulk_uploads (aggregator_id, created_at DESC, upload_id DESC);

-- The file's data rows, staged in chunks of consecutive rows. A chunk is processed in one
-- transaction that also marks it done, adds its counts to the job and drops its staged cells.
CREATE TABLE aggregator.bulk_upload_chunks (
  upload_id        uuid NOT NULL REFERENCES aggregator.bulk_uploads (upload_id) ON DELETE CASCADE,
  chunk_index      integer NOT NULL,
  first_row_number integer NOT NULL,
  last_row_number  integer NOT NULL,
  row_count        integer NOT NULL,
  -- [[row_number, [cell, ...]], ...] as read from the file; NULL once the chunk is done.
  rows             jsonb,
  passed           integer,
  failed           integer,
  skipped          integer,
  done_at          timestamptz,
  PRIMARY KEY (upload_id, chunk_index)
);

-- Rows that were not onboarded (failed or skipped), with their original cells and every reason;
-- the error report is written from here. A passed row is the participant with its
-- (bulk_upload_id, row_number).
CREATE TABLE aggregator.bulk_upload_rows (
  upload_id  uuid NOT NULL REFERENCES aggregator.bulk_uploads (upload_id) ON DELETE CASCADE,
  row_number integer NOT NULL,
  outcome    text NOT NULL CHECK (outcome IN ('failed', 'skipped')),
  cells      jsonb NOT NULL,
  -- [{field, message}, ...]
  errors     jsonb NOT NULL,
  PRIMARY KEY (upload_id, row_number)
);
