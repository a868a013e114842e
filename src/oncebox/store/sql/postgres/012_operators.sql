-- Migration 12 (PostgreSQL): who did what an operator does, and dead-letter replays
-- (each column is described in the SQLite migration of the same number).
ALTER TABLE quarantine ADD COLUMN resolved_by text;
ALTER TABLE dead_letters ADD COLUMN replayed_at double precision;
ALTER TABLE dead_letters ADD COLUMN replayed_by text;
ALTER TABLE dead_letters ADD COLUMN replay_verdict text;
CREATE INDEX dead_letters_reason ON dead_letters (inbox_id, reason, id);
