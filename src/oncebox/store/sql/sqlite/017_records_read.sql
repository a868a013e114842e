-- Migration 17 (SQLite): every read of a record's log position goes through one view,
-- records_read, so that where a position is kept is written once per backend (on
-- PostgreSQL a seal can keep it in a row of its own). Here it is the record's own
-- log_seq, and the view is the table as it is. A migration that rebuilds records drops
-- the view first and makes it again after (SQLite will not rename a table into a name
-- a view already refers to).
CREATE VIEW records_read AS SELECT * FROM records;
