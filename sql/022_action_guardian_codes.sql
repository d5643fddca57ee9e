-- Issue 29 follow-up (docs/decisions.md "Trust II", "A minor's contacts"): the minors whose
-- guardian gave a code for this very action — the acting minor at perform, the target's minor at
-- the move into the status that reveals contacts. A minor's contacts are shown only to the parties
-- of an action that lists that minor here. Actions recorded before list no one (no code of theirs
-- is on record), so a minor's contacts on them stay hidden.
ALTER TABLE signals.actions ADD COLUMN guardian_code_user_ids uuid[] NOT NULL DEFAULT '{}';
