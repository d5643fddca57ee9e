-- Voice campaigns (aggregator schema; issue 9): voice jobs with their O(1) counters, one row per
-- item, and the Idempotency-Key of each create request. Statuses and moves: docs/decisions.md,
-- "Voice campaigns".

-- One job: what to send, to whom (items), and how many items sit in each status. The counters are
-- buckets (each item in exactly one; their sum is total), changed in the same transaction as the
-- item rows they count, so a poll reads them in O(1). `version` grows with every change: the ETag.
CREATE TABLE aggregator.voice_jobs (
  job_id             uuid PRIMARY KEY,
  aggregator_id      uuid NOT NULL REFERENCES aggregator.aggregators (aggregator_id),
  org_id             uuid NOT NULL REFERENCES aggregator.organisations (org_id),
  channel            text NOT NULL CHECK (channel IN ('voice', 'export')),
  -- {script} or {audio_url}; {} for an export.
  content            jsonb NOT NULL,
  -- [{key, value}, ...] as given.
  metadata           jsonb NOT NULL DEFAULT '[]',
  schedule_at        timestamptz,
  created_by         text NOT NULL,
  total              integer NOT NULL,
  pending            integer NOT NULL,
  resolved           integer NOT NULL DEFAULT 0,
  submitted          integer NOT NULL DEFAULT 0,
  sent               integer NOT NULL DEFAULT 0,
  skipped_not_owned  integer NOT NULL DEFAULT 0,
  skipped_no_contact integer NOT NULL DEFAULT 0,
  duplicate_active   integer NOT NULL DEFAULT 0,
  failed             integer NOT NULL DEFAULT 0,
  -- What the provider answered (last batch, how many batches), or the export written.
  provider_response  jsonb,
  -- Export channel: the CSV of resolved contacts, once written.
  export_object_key  text,
  version            bigint NOT NULL DEFAULT 1,
  created_at         timestamptz NOT NULL DEFAULT now(),
  updated_at         timestamptz NOT NULL DEFAULT now(),
  CHECK (pending + resolved + submitted + sent + skipped_not_owned + skipped_no_contact + duplicate_active + failed = total)
);
CREATE INDEX voice_jobs_org_idx ON aggregator.voice_jobs (org_id, created_at DESC, job_id DESC);

-- The items of a job, in the order given (seq from 0). item_id is a participant id of the caller's
-- organisation when all goes well; anything else is kept and skipped. provider_ref and
-- provider_batch_ref are the provider's; the per-item idempotency key sent to the provider is
-- `<job_id>:<item_id>`.
CREATE TABLE aggregator.voice_job_items (
  job_id             uuid NOT NULL REFERENCES aggregator.voice_jobs (job_id) ON DELETE CASCADE,
  item_id            uuid NOT NULL,
  seq                integer NOT NULL,
  status             text NOT NULL DEFAULT 'pending' CHECK (status IN (
                       'pending', 'resolved', 'submitted', 'sent', 'failed',
                       'skipped_not_owned', 'skipped_no_contact', 'duplicate_active')),
  provider_ref       text,
  provider_batch_ref text,
  skip_reason        text,
  error_reason       text,
  updated_at         timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (job_id, item_id)
)
-- Each item is updated about three times (resolved, submitted, sent) and no index covers the
-- columns that change: free room in each page lets those updates be HOT (no new index entries).
WITH (fillfactor = 60);
-- Chunks (seq ranges) and item pages (seq cursor).
CREATE UNIQUE INDEX voice_job_items_seq_idx ON aggregator.voice_job_items (job_id, seq);
-- "Already in another active job": the jobs holding a participant.
CREATE INDEX voice_job_items_item_idx ON aggregator.voice_job_items (item_id);

-- Idempotency-Key of POST /v1/campaign/voice, per calling aggregator: the same key with the same
-- body answers the job it created; with another body, 409.
CREATE TABLE aggregator.voice_idempotency_keys (
  aggregator_id   uuid NOT NULL REFERENCES aggregator.aggregators (aggregator_id),
  idempotency_key text NOT NULL,
  -- SHA-256 (hex) of the validated request body.
  request_hash    text NOT NULL,
  -- Deferred: the key is claimed first, in the transaction that then creates its job.
  job_id          uuid NOT NULL REFERENCES aggregator.voice_jobs (job_id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED,
  created_at      timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (aggregator_id, idempotency_key)
);
