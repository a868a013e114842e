-- Migration 30 (PostgreSQL): one OPEN quarantine row per distinct newcomer, not one row
-- ever. A newcomer's row closed by an operator (kept or accepted) took every later
-- resend of it as a repeat, counted on the closed row: no open conflict, no warning,
-- though the sender still disagreed with the record (which an accept may since have
-- moved past). Such a resend now opens a row of its own. The newcomer's index stays for
-- the reads by identity; a partial unique index keeps one open row per newcomer.
CREATE INDEX quarantine_newcomer ON quarantine (inbox_id, ident, witness);
ALTER TABLE quarantine DROP CONSTRAINT quarantine_one_per_newcomer;
CREATE UNIQUE INDEX quarantine_one_open ON quarantine (inbox_id, ident, witness)
WHERE status = 'open';
