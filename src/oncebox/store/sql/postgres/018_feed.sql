-- Migration 18 (PostgreSQL): the feed, and the consumers that follow it.
-- The log is the feed: an entry that seals a record's revision says which (its inbox,
-- record and revision), so a revision's feed position is the seq of the entry that sealed
-- it, given at seal time; a revision whose transaction committed late comes later, and a
-- cursor never skips one. No table or index more: an accepted record writes nothing more.
ALTER TABLE log ADD COLUMN inbox_id bigint, ADD COLUMN record_id bigint,
    ADD COLUMN revision bigint;
ALTER TABLE log_pending ADD COLUMN revision bigint, ADD COLUMN inbox_id bigint;
-- What is sealed already is on the feed too: first revisions, by their records' seals.
UPDATE log SET inbox_id = s.inbox_id, record_id = s.id, revision = 1
FROM (SELECT r.id, r.inbox_id, coalesce(p.seq, r.log_seq) AS seq
      FROM records r LEFT JOIN seal_positions p ON p.record_id = r.id) s
WHERE log.seq = s.seq AND s.seq > 0;

-- A consumer: a named cursor over one inbox's feed, moved only under its lease (the
-- fence's kind 'consumer'). position: the last acknowledged; handed_out: the last given.
CREATE TABLE consumers (
    name       text PRIMARY KEY,
    inbox_id   bigint NOT NULL REFERENCES inboxes(id),
    position   bigint NOT NULL,
    handed_out bigint NOT NULL,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL
);
