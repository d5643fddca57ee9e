-- Items of the signals service, identified by (item_network, item_domain, item_type, item_id);
-- item_id alone is unique, so the same id can never name two items.
CREATE TABLE signals.items (
  item_id           uuid PRIMARY KEY,
  item_network      text NOT NULL,
  item_domain       text NOT NULL,
  item_type         text NOT NULL,
  item_state        jsonb NOT NULL,
  item_locations    jsonb NOT NULL DEFAULT '[]',
  item_instance_url text,
  item_schema_url   text,
  created_by        text,
  lifecycle_status  text NOT NULL CHECK (lifecycle_status IN ('draft', 'live', 'paused', 'retired')),
  created_at        timestamptz NOT NULL DEFAULT now(),
  updated_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX items_scope_idx ON signals.items (item_network, item_domain, item_type, lifecycle_status, updated_at DESC);
CREATE INDEX items_updated_idx ON signals.items (updated_at, item_id);
