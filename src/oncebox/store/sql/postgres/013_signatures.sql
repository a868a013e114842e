-- Migration 13 (PostgreSQL): what a signed webhook's verified signature vouched
-- for, beside the other transport facts (see the SQLite migration of the same number).
ALTER TABLE records ADD COLUMN signature text;
ALTER TABLE quarantine ADD COLUMN signature text;
ALTER TABLE dead_letters ADD COLUMN signature text;
