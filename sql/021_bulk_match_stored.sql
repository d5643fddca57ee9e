-- Issue 29 (Trust II, finding 6; docs/decisions.md "The rest of the review's list"): the match
-- suggestions of a bulk upload (lib/aggregator/bulk/suggest.ts) are computed once by the worker
-- (task bulk-upload-suggest, enqueued with the job) and stored here; POST /v1/bulk-uploads/{id}/match
-- and the console's job page only read them. Either the suggestions with the file's headers
-- ({headers, fields, unmatched_columns, required_unmatched, suggested_mapping, sampled_rows}) or
-- {file_problem} when the file cannot be read; NULL until the task has run. Headers and scores
-- only: no cell of the file.
ALTER TABLE aggregator.bulk_uploads ADD COLUMN match_suggestions jsonb;

-- Jobs received before this migration get theirs from the same task (its files not yet deleted).
SELECT graphile_worker.add_job('bulk-upload-suggest', json_build_object('upload_id', upload_id),
         job_key => 'bulk-upload-suggest:' || upload_id)
  FROM aggregator.bulk_uploads WHERE purged_at IS NULL;

-- POST /v1/bulk-uploads/{id}/match per aggregator (rate-limiter-flexible's RateLimiterPostgres;
-- one row per aggregator, reset in place).
CREATE TABLE aggregator.bulk_match_rate_limits (LIKE platform.support_rate_limits INCLUDING ALL);
