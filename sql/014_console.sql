-- Operator console (issue 18): server-side sessions behind an HttpOnly cookie, and the single-use
-- console links (`ldp console`) already exchanged for one.

CREATE TABLE aggregator.console_sessions (
  -- SHA-256 of the random cookie value: a database read never yields a usable cookie.
  session_hash  bytea PRIMARY KEY,
  aggregator_id uuid NOT NULL REFERENCES aggregator.aggregators (aggregator_id) ON DELETE CASCADE,
  -- The aggregator claims the console link carried (sub, aggregator_id, org_id, aggregator_type, roles).
  claims        jsonb NOT NULL,
  created_at    timestamptz NOT NULL DEFAULT now(),
  expires_at    timestamptz NOT NULL
);
CREATE INDEX console_sessions_expires_idx ON aggregator.console_sessions (expires_at);

CREATE TABLE aggregator.console_login_links (
  -- The `jti` of a console link token; its row makes the link single-use.
  jti        text PRIMARY KEY,
  used_at    timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL
);
