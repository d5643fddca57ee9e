-- The graphile-worker worker ids of each worker process, so that the jobs a crashed process held
-- locked can be released (graphile_worker.force_unlock_workers) instead of waiting for
-- graphile-worker's 4-hour stale-lock expiry.
ALTER TABLE platform.worker_heartbeats ADD COLUMN job_worker_ids text[] NOT NULL DEFAULT '{}';
