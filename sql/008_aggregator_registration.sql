-- Issue 8: registration links and public registration, organisation and aggregator registration
-- with approval by signed review links.

-- Approval outcomes: `approved` stays the value bearerAuth accepts (docs/decisions.md,
-- "Registration, links and approval"); a refused registration is `rejected`.
ALTER TABLE aggregator.organisations DROP CONSTRAINT organisations_status_check;
ALTER TABLE aggregator.organisations ADD CONSTRAINT organisations_status_check CHECK (status IN ('pending', 'approved', 'suspended', 'rejected'));
ALTER TABLE aggregator.aggregators DROP CONSTRAINT aggregators_status_check;
ALTER TABLE aggregator.aggregators ADD CONSTRAINT aggregators_status_check CHECK (status IN ('pending', 'approved', 'suspended', 'rejected'));

-- What an organisation registered with (POST /v1/orgs/create); owner identity is encrypted.
ALTER TABLE aggregator.organisations
  ADD COLUMN registration   jsonb,
  ADD COLUMN status_reason  text,
  ADD COLUMN decided_at     timestamptz;

-- The profile an aggregator registered with (POST /v1/aggregator-registrations/create); contact encrypted.
ALTER TABLE aggregator.aggregators
  ADD COLUMN registration   jsonb,
  ADD COLUMN status_reason  text,
  ADD COLUMN decided_at     timestamptz,
  -- When the organisation was last pushed to signals as an item (tasks/aggregator-push-organisation.ts).
  ADD COLUMN org_pushed_at  timestamptz;

-- People who may log in for an organisation or aggregator: disabled until an admin approves.
CREATE TABLE aggregator.users (
  user_id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  -- The token subject (built-in or OIDC issuer) for users who registered with a token.
  issuer          text,
  subject         text,
  org_id          uuid NOT NULL REFERENCES aggregator.organisations (org_id),
  aggregator_id   uuid REFERENCES aggregator.aggregators (aggregator_id),
  role            text NOT NULL CHECK (role IN ('owner', 'aggregator_admin')),
  name_encrypted  text,
  email_encrypted text,
  phone_encrypted text,
  email_index     bytea,
  enabled         boolean NOT NULL DEFAULT false,
  created_at      timestamptz NOT NULL DEFAULT now(),
  updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX users_subject_uq ON aggregator.users (issuer, subject) WHERE subject IS NOT NULL;
CREATE INDEX users_email_index_idx ON aggregator.users (email_index);
CREATE INDEX users_org_idx ON aggregator.users (org_id);

-- The identity-provider group mirrored for each organisation (its members: the org's users).
CREATE TABLE aggregator.identity_groups (
  group_id   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  org_id     uuid NOT NULL UNIQUE REFERENCES aggregator.organisations (org_id),
  name       text NOT NULL UNIQUE,
  created_at timestamptz NOT NULL DEFAULT now()
);

-- One row per review e-mail: its signed links (approve, reject) carry review_id as `jti`; the first
-- decision sets used_at by compare-and-set, so each e-mail decides at most once.
CREATE TABLE aggregator.review_links (
  review_id     uuid PRIMARY KEY,
  subject_kind  text NOT NULL CHECK (subject_kind IN ('organisation', 'aggregator')),
  subject_id    uuid NOT NULL,
  expires_at    timestamptz NOT NULL,
  used_at       timestamptz,
  used_intent   text CHECK (used_intent IN ('approve', 'reject')),
  created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX review_links_subject_idx ON aggregator.review_links (subject_kind, subject_id);

-- Shareable registration links (spec "Registration link").
CREATE TABLE aggregator.registration_links (
  link_id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  aggregator_id     uuid NOT NULL REFERENCES aggregator.aggregators (aggregator_id),
  org_id            uuid NOT NULL REFERENCES aggregator.organisations (org_id),
  slug              text NOT NULL CHECK (slug ~ '^[a-z0-9]+(-[a-z0-9]+)*$' AND length(slug) BETWEEN 3 AND 60),
  domain            text NOT NULL,
  registration_mode text NOT NULL,
  status            text NOT NULL DEFAULT 'draft' CHECK (status IN ('draft', 'live', 'retired')),
  context           jsonb NOT NULL DEFAULT '{}',
  expires_at        timestamptz,
  activated_at      timestamptz,
  retired_at        timestamptz,
  -- O(1) metrics: bumped by each public submission in its own transaction.
  passed            integer NOT NULL DEFAULT 0,
  failed            integer NOT NULL DEFAULT 0,
  skipped           integer NOT NULL DEFAULT 0,
  created_at        timestamptz NOT NULL DEFAULT now(),
  updated_at        timestamptz NOT NULL DEFAULT now()
);
-- The public URL names the organisation and the slug, so a slug is unique within the organisation.
CREATE UNIQUE INDEX registration_links_slug_uq ON aggregator.registration_links (org_id, slug);
CREATE INDEX registration_links_aggregator_idx ON aggregator.registration_links (aggregator_id, created_at DESC, link_id DESC);

-- Participants that arrived through a registration link, the consent they gave there, and why
-- signals refused the push (a refused item is kept, not retried: tasks/aggregator-push-participant.ts).
ALTER TABLE aggregator.participants
  ADD COLUMN registration_link_id uuid REFERENCES aggregator.registration_links (link_id),
  ADD COLUMN consent              jsonb,
  ADD COLUMN push_error           text;
-- Blind indexes across aggregators, for `owned_elsewhere`.
CREATE INDEX participants_phone_index_idx ON aggregator.participants (phone_index) WHERE phone_index IS NOT NULL;
CREATE INDEX participants_email_index_idx ON aggregator.participants (email_index) WHERE email_index IS NOT NULL;

-- rate-limiter-flexible's RateLimiterPostgres store (its own table layout), for the per-link limit.
CREATE TABLE aggregator.registration_rate_limits (
  key    varchar(255) PRIMARY KEY,
  points integer NOT NULL DEFAULT 0,
  expire bigint
);
