-- Hardening (issue 15): PII at rest and retention of bulk-upload data. docs/decisions.md "Hardening".

-- The raw cells and reasons of a failed or skipped row are stored encrypted (AES-256-GCM with the
-- platform's PII key, lib/platform/crypto.ts) as one JSON value {cells, errors} in `sealed`; they
-- are decrypted only while the error report is written. Rows written before this migration keep
-- their plaintext columns until retention deletes them.
ALTER TABLE aggregator.bulk_upload_rows
  ADD COLUMN sealed text,
  ALTER COLUMN cells DROP NOT NULL,
  ALTER COLUMN errors DROP NOT NULL,
  ADD CONSTRAINT bulk_upload_rows_content_ck CHECK (sealed IS NOT NULL OR (cells IS NOT NULL AND errors IS NOT NULL));

-- Staged rows of a chunk, encrypted as one value (NULL once the chunk is done, as `rows`).
ALTER TABLE aggregator.bulk_upload_chunks ADD COLUMN rows_sealed text;

-- The result of a dry run, encrypted (it holds the rows' values and reasons quoting cells).
ALTER TABLE aggregator.bulk_upload_previews ADD COLUMN result_sealed text;

-- Set by task bulk-upload-retention once the job's file, error report, error rows and previews
-- were deleted (BULK_RETENTION_DAYS after the job completed or failed, or after an unstarted job
-- was created); GET /v1/bulk-uploads/{id}/errors then answers 410.
ALTER TABLE aggregator.bulk_uploads ADD COLUMN purged_at timestamptz;
CREATE INDEX bulk_uploads_retention_idx ON aggregator.bulk_uploads (COALESCE(completed_at, created_at)) WHERE purged_at IS NULL;
