-- Foundation: one schema per service, plus `platform` for what the processes share
-- (migration records live in platform.schema_migrations, created by lib/migrate.ts).

CREATE SCHEMA IF NOT EXISTS signals;
CREATE SCHEMA IF NOT EXISTS search;
CREATE SCHEMA IF NOT EXISTS aggregator;

-- Each worker process records a heartbeat; /ready reports "worker running" from it, so a service
-- run alone (`ldp serve`) knows whether any worker is alive.
CREATE TABLE platform.worker_heartbeats (
  worker_id    text PRIMARY KEY,
  hostname     text NOT NULL,
  pid          integer NOT NULL,
  started_at   timestamptz NOT NULL DEFAULT now(),
  last_seen_at timestamptz NOT NULL DEFAULT now()
);

-- API keys of the signals and search services (header x-api-key). Only a SHA-256 of the key is
-- stored; the key itself is printed once by `ldp keys create`.
CREATE TABLE signals.api_keys (
  key_id     uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  name       text NOT NULL,
  key_prefix text NOT NULL,
  key_hash   bytea NOT NULL UNIQUE,
  created_at timestamptz NOT NULL DEFAULT now(),
  revoked_at timestamptz
);

CREATE TABLE search.api_keys (LIKE signals.api_keys INCLUDING ALL);

-- Organisations and the aggregators that act for them. `types` are the network's aggregator types
-- (the participant domains an aggregator may onboard).
CREATE TABLE aggregator.organisations (
  org_id       uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  slug         text NOT NULL UNIQUE CHECK (slug ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
  display_name text NOT NULL,
  status       text NOT NULL DEFAULT 'approved' CHECK (status IN ('pending', 'approved', 'suspended')),
  created_at   timestamptz NOT NULL DEFAULT now(),
  updated_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE aggregator.aggregators (
  aggregator_id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  org_id        uuid NOT NULL REFERENCES aggregator.organisations (org_id),
  name          text NOT NULL,
  types         text[] NOT NULL CHECK (cardinality(types) > 0),
  status        text NOT NULL DEFAULT 'approved' CHECK (status IN ('pending', 'approved', 'suspended')),
  created_at    timestamptz NOT NULL DEFAULT now(),
  updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX aggregators_org_id_idx ON aggregator.aggregators (org_id);
