-- oncebox schema 9 for PostgreSQL: what a signed webhook's verified signature vouched
-- for, beside the other transport facts (see the SQLite migration 012).
ALTER TABLE records ADD COLUMN signature text;
ALTER TABLE quarantine ADD COLUMN signature text;
ALTER TABLE dead_letters ADD COLUMN signature text;
