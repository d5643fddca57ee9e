-- People of the signals service (issue 7): users, guardian consent, one-time codes, sessions,
-- login flows, actions and their events, and the rate-limit counters of rate-limiter-flexible.
-- Decisions: docs/decisions.md, "People, consent and actions".

-- One user per person, owned by the platform's identity (not by an aggregator). Identity fields
-- are encrypted (AES-256-GCM, lib/platform/crypto.ts); the same person is found again through the
-- HMAC blind index of the E.164 phone or the lower-cased e-mail, unique across the platform.
CREATE TABLE signals.users (
  user_id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  network         text NOT NULL,
  domain          text,
  name_encrypted  text,
  phone_encrypted text,
  email_encrypted text,
  phone_index     bytea,
  email_index     bytea,
  age             integer CHECK (age BETWEEN 0 AND 120),
  -- The age was given on this date; the age today is age + whole years since.
  age_given_on    date,
  status          text NOT NULL CHECK (status IN ('active', 'disabled', 'pending_guardian')),
  created_by      text NOT NULL,
  created_at      timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now(),
  CHECK (phone_index IS NOT NULL OR email_index IS NOT NULL)
);
CREATE UNIQUE INDEX users_phone_uq ON signals.users (phone_index) WHERE phone_index IS NOT NULL;
CREATE UNIQUE INDEX users_email_uq ON signals.users (email_index) WHERE email_index IS NOT NULL;

-- The guardian of a minor's user, and when the guardian confirmed with a code.
CREATE TABLE signals.guardians (
  ward_user_id             uuid PRIMARY KEY REFERENCES signals.users (user_id) ON DELETE CASCADE,
  name_encrypted           text NOT NULL,
  phone_encrypted          text,
  email_encrypted          text,
  phone_index              bytea,
  email_index              bytea,
  declaration_accepted_at  timestamptz NOT NULL,
  same_contact_acknowledged boolean NOT NULL DEFAULT false,
  confirmed_at             timestamptz,
  created_at               timestamptz NOT NULL DEFAULT now(),
  CHECK (phone_index IS NOT NULL OR email_index IS NOT NULL)
);
CREATE INDEX guardians_phone_idx ON signals.guardians (phone_index) WHERE phone_index IS NOT NULL;
CREATE INDEX guardians_email_idx ON signals.guardians (email_index) WHERE email_index IS NOT NULL;

-- Items of people: the user an onboarded participant (or a signed-up person's item) belongs to.
ALTER TABLE signals.items ADD COLUMN user_id uuid REFERENCES signals.users (user_id);
CREATE INDEX items_user_idx ON signals.items (user_id) WHERE user_id IS NOT NULL;

-- One-time codes (6 digits): only an HMAC of the code is stored; a code is used once, expires,
-- and counts wrong tries. `scope` names what the code is for (e.g. `guardian:<user_id>`).
CREATE TABLE signals.one_time_codes (
  code_id    uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  scope      text NOT NULL,
  code_hash  bytea NOT NULL,
  expires_at timestamptz NOT NULL,
  used_at    timestamptz,
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX one_time_codes_scope_idx ON signals.one_time_codes (scope, created_at DESC);
-- Wrong tries per scope, kept apart from the codes so that a new code does not reset them.
CREATE TABLE signals.one_time_code_failures (
  scope     text NOT NULL,
  failed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX one_time_code_failures_idx ON signals.one_time_code_failures (scope, failed_at DESC);

-- Browser sessions: the cookie holds a random token, only its SHA-256 is stored.
CREATE TABLE signals.sessions (
  session_id  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  token_hash  bytea NOT NULL UNIQUE,
  user_id     uuid NOT NULL REFERENCES signals.users (user_id) ON DELETE CASCADE,
  method      text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  expires_at  timestamptz NOT NULL,
  revoked_at  timestamptz
);
CREATE INDEX sessions_user_idx ON signals.sessions (user_id);

-- Login flows in progress: the OIDC state, nonce and PKCE verifier, or the built-in code login.
CREATE TABLE signals.login_flows (
  flow_id       uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  kind          text NOT NULL CHECK (kind IN ('oidc', 'code')),
  state         text UNIQUE,
  nonce         text,
  code_verifier text,
  user_id       uuid REFERENCES signals.users (user_id) ON DELETE CASCADE,
  return_to     text,
  expires_at    timestamptz NOT NULL,
  used_at       timestamptz,
  created_at    timestamptz NOT NULL DEFAULT now()
);

-- Actions between a source and a target item (POST /api/v1/action/perform).
CREATE TABLE signals.actions (
  action_id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  action_type           text NOT NULL,
  source_item_id        uuid NOT NULL REFERENCES signals.items (item_id),
  target_item_id        uuid NOT NULL REFERENCES signals.items (item_id),
  target_instance_url   text NOT NULL,
  action_status         text NOT NULL,
  terminal              boolean NOT NULL DEFAULT false,
  update_count          integer NOT NULL DEFAULT 0,
  requirements_snapshot jsonb,
  consent               jsonb,
  actor                 text NOT NULL,
  actor_user_id         uuid REFERENCES signals.users (user_id),
  acting_org_id         uuid,
  acting_as_user_id     uuid REFERENCES signals.users (user_id),
  created_at            timestamptz NOT NULL DEFAULT now(),
  updated_at            timestamptz NOT NULL DEFAULT now()
);
-- One open action per (source, target, action_type): the index is the final guard against races.
CREATE UNIQUE INDEX actions_open_uq ON signals.actions (source_item_id, target_item_id, action_type) WHERE NOT terminal;
CREATE INDEX actions_target_idx ON signals.actions (target_item_id);

CREATE TABLE signals.action_events (
  event_id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  action_id     uuid NOT NULL REFERENCES signals.actions (action_id) ON DELETE CASCADE,
  from_status   text,
  to_status     text NOT NULL,
  update_count  integer NOT NULL,
  actor         text NOT NULL,
  note          text,
  created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX action_events_action_idx ON signals.action_events (action_id, event_id);

-- rate-limiter-flexible's RateLimiterPostgres table (its own layout), created here so that no
-- request creates tables.
CREATE TABLE signals.rate_limits (
  key    varchar(255) PRIMARY KEY,
  points integer NOT NULL DEFAULT 0,
  expire bigint
);
