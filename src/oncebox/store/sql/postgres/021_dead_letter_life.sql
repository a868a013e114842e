-- Migration 21 (PostgreSQL): a dead letter's life cycle. status: open (waiting), replayed
-- (delivered again and decided: replay_verdict says how) or archived (put aside, with
-- who and why). A delivery again that is refused again updates the same dead letter
-- (attempts, last_reason, last_tried) rather than making a new one.
ALTER TABLE dead_letters ADD COLUMN status text NOT NULL DEFAULT 'open';
ALTER TABLE dead_letters ADD COLUMN attempts bigint NOT NULL DEFAULT 0;
ALTER TABLE dead_letters ADD COLUMN last_reason text;
ALTER TABLE dead_letters ADD COLUMN last_tried double precision;
ALTER TABLE dead_letters ADD COLUMN archived_at double precision;
ALTER TABLE dead_letters ADD COLUMN archived_by text;
ALTER TABLE dead_letters ADD COLUMN archive_note text;
-- Before, a replay refused again made a new dead letter, which holds the open state:
-- every dead letter replayed so far is closed.
UPDATE dead_letters SET status = 'replayed', attempts = 1, last_tried = replayed_at
WHERE replayed_at IS NOT NULL;
CREATE INDEX dead_letters_status ON dead_letters (inbox_id, status, id);
