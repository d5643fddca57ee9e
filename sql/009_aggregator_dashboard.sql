-- Issue 10: support requests (both services), the aggregator dashboard and the profile-export
-- audit. Decisions: docs/decisions.md, "Dashboard, export, support".

-- Support requests filed on signals (POST /api/v1/support/) and on the aggregator
-- (POST /v1/support), lib/network/support.ts. One table for both, so a reference is unique across
-- the platform. The submitter's name, contacts and message are encrypted (AES-256-GCM, PII_KEY);
-- attachments wait in object storage until the e-mail task has sent them, then are deleted.
CREATE TABLE platform.support_requests (
  request_id          uuid PRIMARY KEY,
  reference           text NOT NULL UNIQUE CHECK (reference ~ '^SUP-[0-9]{8}-[A-Z0-9]{6}$'),
  service             text NOT NULL CHECK (service IN ('signals', 'aggregator')),
  -- Who filed it: the aggregator token's subject, or the signals API key id.
  filed_by            text NOT NULL,
  type                text NOT NULL,
  -- {name, email?, phone?, details} as encrypted JSON.
  request_encrypted   text NOT NULL,
  -- [{filename, content_type, size_bytes, object_key}]
  attachments         jsonb NOT NULL DEFAULT '[]',
  created_at          timestamptz NOT NULL DEFAULT now(),
  emailed_at          timestamptz,
  message_id          text,
  rejected_recipients text[]
);

-- rate-limiter-flexible's RateLimiterPostgres store (its own layout; created here so that no
-- process creates tables at run time). Keys are hashed submitter identifiers.
CREATE TABLE platform.support_rate_limits (
  key    varchar(255) PRIMARY KEY,
  points integer NOT NULL DEFAULT 0,
  expire bigint
);
CREATE TABLE aggregator.dashboard_rate_limits (LIKE platform.support_rate_limits INCLUDING ALL);

-- The dashboard payload of each aggregator (lib/aggregator/dashboard.ts), computed by the
-- aggregator-dashboard-refresh task: per-domain rollups, no personal data.
CREATE TABLE aggregator.dashboards (
  aggregator_id uuid PRIMARY KEY REFERENCES aggregator.aggregators (aggregator_id),
  rollup        jsonb NOT NULL,
  computed_at   timestamptz NOT NULL
);

-- The dashboard's participant pages: keyset reads, newest first, per aggregator and domain, and
-- the same within one lifecycle status (lifecycle_status included so that skipping to a page
-- number can be an index-only scan).
CREATE INDEX participants_dashboard_idx ON aggregator.participants (aggregator_id, domain, created_at DESC, participant_id DESC);
CREATE INDEX participants_dashboard_status_idx ON aggregator.participants
  (aggregator_id, domain, (coalesce(lifecycle_status, 'pending')), created_at DESC, participant_id DESC) INCLUDE (lifecycle_status);

-- Every profile export (POST /v1/dashboard/export/profiles, `ldp export`): who, when, how many
-- items asked for and exported, which fields.
CREATE TABLE aggregator.profile_exports (
  export_id       uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  aggregator_id   uuid NOT NULL REFERENCES aggregator.aggregators (aggregator_id),
  org_id          uuid NOT NULL REFERENCES aggregator.organisations (org_id),
  exported_by     text NOT NULL,
  domain          text,
  requested_count integer NOT NULL,
  exported_count  integer NOT NULL,
  absent_count    integer NOT NULL,
  fields          text[] NOT NULL,
  created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX profile_exports_aggregator_idx ON aggregator.profile_exports (aggregator_id, created_at DESC);
