-- Trust II (issue 29): retention of voice exports, and joining an existing organisation.
-- docs/decisions.md "Trust II", "The rest of the review's list".

-- When an export job's CSV was written, and when task voice-export-retention deleted it
-- (VOICE_EXPORT_RETENTION_DAYS after it was written); GET /v1/campaign/exports/{id} then answers 410.
ALTER TABLE aggregator.voice_jobs ADD COLUMN export_written_at timestamptz, ADD COLUMN export_purged_at timestamptz;
UPDATE aggregator.voice_jobs SET export_written_at = updated_at WHERE export_object_key IS NOT NULL;
CREATE INDEX voice_jobs_export_retention_idx ON aggregator.voice_jobs (export_written_at)
  WHERE export_written_at IS NOT NULL AND export_purged_at IS NULL;

-- An aggregator registration naming an existing organisation (`org_id`) waits for that
-- organisation's approval (a `join` review e-mailed to its contact) before the network admin's.
-- Registrations made before this rule keep the one they were made under: marked as approved by
-- their organisation.
ALTER TABLE aggregator.aggregators ADD COLUMN org_approved_at timestamptz;
UPDATE aggregator.aggregators SET org_approved_at = created_at WHERE registration ? 'org_id';
ALTER TABLE aggregator.review_links DROP CONSTRAINT review_links_subject_kind_check,
  ADD CONSTRAINT review_links_subject_kind_check CHECK (subject_kind IN ('organisation', 'aggregator', 'join'));
