-- Migration 12 (SQLite): who did what an operator does, and dead-letter replays.
-- * quarantine.resolved_by: the actor (an API token's name) of each resolution;
-- * dead_letters.replayed_*: when a dead letter was delivered again, by whom, with which
--   verdict (the log has the whole decision);
-- * an index for filtering dead letters by reason.
ALTER TABLE quarantine ADD COLUMN resolved_by TEXT;
ALTER TABLE dead_letters ADD COLUMN replayed_at REAL;
ALTER TABLE dead_letters ADD COLUMN replayed_by TEXT;
ALTER TABLE dead_letters ADD COLUMN replay_verdict TEXT;
CREATE INDEX dead_letters_reason ON dead_letters (inbox_id, reason, id);
