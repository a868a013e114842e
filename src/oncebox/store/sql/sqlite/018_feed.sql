-- Migration 18 (SQLite): the feed, and the consumers that follow it.
-- The log is the feed: an entry that seals a record's revision says which (its inbox,
-- record and revision), so a revision's feed position is the seq of the entry that sealed
-- it, given at seal time; a revision whose transaction committed late comes later, and a
-- cursor never skips one. No table or index more: an accepted record writes nothing more.
ALTER TABLE log ADD COLUMN inbox_id INTEGER;
ALTER TABLE log ADD COLUMN record_id INTEGER;
ALTER TABLE log ADD COLUMN revision INTEGER;
ALTER TABLE log_pending ADD COLUMN revision INTEGER;
ALTER TABLE log_pending ADD COLUMN inbox_id INTEGER;
-- What is sealed already is on the feed too: first revisions, by their records' seals.
UPDATE log SET (inbox_id, record_id, revision) =
  (SELECT r.inbox_id, r.id, 1 FROM records r WHERE r.log_seq = log.seq)
WHERE seq IN (SELECT log_seq FROM records WHERE log_seq > 0);

-- A consumer: a named cursor over one inbox's feed, moved only under its lease (the
-- fence's kind 'consumer'). position: the last acknowledged; handed_out: the last given.
CREATE TABLE consumers (
    name       TEXT PRIMARY KEY,
    inbox_id   INTEGER NOT NULL REFERENCES inboxes(id),
    position   INTEGER NOT NULL,
    handed_out INTEGER NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
