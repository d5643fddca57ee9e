-- Less index and constraint work per row written by bulk onboarding (issue 17, docs/decisions.md
-- "Bulk onboarding II", the sixth pass), each change measured and answering every query as before.

-- signals.items_scope_idx (network, domain, type, lifecycle_status, updated_at DESC) served no query:
-- native discover reads only live items, through the partial items_live_* indexes (its scope and
-- order through items_live_newest_idx), the search service's reconciliation reads items_updated_idx,
-- and every other read is by item_id or user_id. It was maintained for every item written.
DROP INDEX signals.items_scope_idx;

-- A participant's organisation is its aggregator's organisation: one composite foreign key says
-- that, and checks one parent row per inserted participant instead of two (aggregator, then
-- organisation); the organisation's existence follows from aggregators.org_id's own foreign key.
-- It also refuses what the two keys let through: a participant whose org_id is not its aggregator's,
-- and moving an aggregator that has participants to another organisation.
ALTER TABLE aggregator.aggregators ADD CONSTRAINT aggregators_aggregator_org_uq UNIQUE (aggregator_id, org_id);
ALTER TABLE aggregator.participants
  DROP CONSTRAINT participants_aggregator_id_fkey,
  DROP CONSTRAINT participants_org_id_fkey,
  ADD CONSTRAINT participants_aggregator_org_fkey FOREIGN KEY (aggregator_id, org_id)
    REFERENCES aggregator.aggregators (aggregator_id, org_id);

-- Phone and e-mail blind indexes: one btree each instead of two. (phone_index, aggregator_id) is
-- unique per aggregator as (aggregator_id, phone_index) was, and with the blind index leading it
-- also serves the lookups across aggregators (owned elsewhere, public registration) that the
-- separate (phone_index) indexes served; the duplicate lookup of bulk onboarding (`findRegistered`,
-- aggregator_id = $1 AND phone_index = ANY(...)) uses both columns. A participant with a phone and
-- an e-mail wrote four entries into these indexes, now two.
DROP INDEX aggregator.participants_phone_index_idx;
DROP INDEX aggregator.participants_email_index_idx;
DROP INDEX aggregator.participants_phone_uq;
DROP INDEX aggregator.participants_email_uq;
CREATE UNIQUE INDEX participants_phone_uq ON aggregator.participants (phone_index, aggregator_id) WHERE phone_index IS NOT NULL;
CREATE UNIQUE INDEX participants_email_uq ON aggregator.participants (email_index, aggregator_id) WHERE email_index IS NOT NULL;
