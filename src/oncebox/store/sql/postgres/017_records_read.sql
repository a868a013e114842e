-- Migration 17 (PostgreSQL): every read of a record's log position goes through one
-- view, records_read, so that where a position is kept is written once per backend. A
-- record sealed through the queue (log_seq = -1, migration 14) has its position in
-- seal_positions; any other has it in log_seq (NULL while unsealed). PostgreSQL inlines
-- the view, so a read costs what the join written out would. A column added to records
-- is added here too, at the end (CREATE OR REPLACE VIEW); a migration that rebuilds
-- records drops the view first and makes it again after.
CREATE VIEW records_read AS
SELECT r.id, r.inbox_id, r.ident, r.identity, r.witness, r.revision, r.content, r.fields,
       r.first_seen, r.last_seen, r.seen_count, r.evicted_at, r.late_replays,
       r.max_lateness, r.device_time, r.snapshot_id, r.delivery_id,
       CASE WHEN r.log_seq = -1 THEN sp.seq ELSE r.log_seq END AS log_seq,
       r.revised_at, r.signature
FROM records r LEFT JOIN seal_positions sp ON r.log_seq = -1 AND sp.record_id = r.id;
