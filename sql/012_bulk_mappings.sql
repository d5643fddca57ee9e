-- Bulk onboarding II (issue 17): saved mappings, the mapping a job used, and dry runs.
-- docs/decisions.md "Bulk onboarding II".

-- Saved mappings of an aggregator, one row per version: PUT adds a version, old ones stay
-- readable (a job records the id and version it used); DELETE retires every version.
CREATE TABLE aggregator.bulk_mappings (
  mapping_id       uuid NOT NULL,
  version          integer NOT NULL CHECK (version >= 1),
  aggregator_id    uuid NOT NULL REFERENCES aggregator.aggregators (aggregator_id),
  name             text NOT NULL,
  participant_type text NOT NULL,
  -- lib/aggregator/bulk/mapping.ts: header → field | null, or field → field spec.
  mapping          jsonb NOT NULL,
  created_by       text NOT NULL,
  created_at       timestamptz NOT NULL DEFAULT now(),
  retired_at       timestamptz,
  PRIMARY KEY (mapping_id, version)
);
CREATE INDEX bulk_mappings_aggregator_idx ON aggregator.bulk_mappings (aggregator_id, mapping_id, version DESC);

ALTER TABLE aggregator.bulk_uploads
  ADD COLUMN mapping_id      uuid,
  ADD COLUMN mapping_version integer,
  ADD CONSTRAINT bulk_uploads_mapping_fk FOREIGN KEY (mapping_id, mapping_version)
    REFERENCES aggregator.bulk_mappings (mapping_id, version);

-- Dry runs of a pending job: the first `rows` data rows coerced, validated and checked for
-- duplicates by task bulk-upload-preview, which writes `result`; nothing else is written.
CREATE TABLE aggregator.bulk_upload_previews (
  preview_id   uuid PRIMARY KEY,
  upload_id    uuid NOT NULL REFERENCES aggregator.bulk_uploads (upload_id) ON DELETE CASCADE,
  rows         integer NOT NULL CHECK (rows BETWEEN 1 AND 1000),
  status       text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'completed', 'failed')),
  result       jsonb,
  created_by   text NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT now(),
  completed_at timestamptz
);
CREATE INDEX bulk_upload_previews_upload_idx ON aggregator.bulk_upload_previews (upload_id, created_at DESC);

-- Staged rows are written once and read once, whole: json (stored as the text) spares PostgreSQL
-- parsing them into jsonb and printing them back (issue 17, speed).
ALTER TABLE aggregator.bulk_upload_chunks ALTER COLUMN rows TYPE json;
