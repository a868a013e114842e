-- Migration 19 (PostgreSQL): records you can find by the key their delivery came with.
-- A record and a quarantined newcomer keep their delivery's key (NULL: none came, or
-- made before this migration, which could not know it). Where the key is the identity
-- (keyed and ussd-h1 inboxes, a json inbox identified by its key) the identity's own
-- unique index finds it already, so records_key and quarantine_key hold only the rows
-- whose key differs: an accepted delivery of such an inbox writes no index entry more.
-- An index holds a key's first 256 characters (a b-tree entry is bounded), the whole key
-- compared on the row.
ALTER TABLE records ADD COLUMN key text;
ALTER TABLE quarantine ADD COLUMN key text;
CREATE OR REPLACE VIEW records_read AS
SELECT r.id, r.inbox_id, r.ident, r.identity, r.witness, r.revision, r.content, r.fields,
       r.first_seen, r.last_seen, r.seen_count, r.evicted_at, r.late_replays,
       r.max_lateness, r.device_time, r.snapshot_id, r.delivery_id,
       CASE WHEN r.log_seq = -1 THEN sp.seq ELSE r.log_seq END AS log_seq,
       r.revised_at, r.signature, r.key
FROM records r LEFT JOIN seal_positions sp ON r.log_seq = -1 AND sp.record_id = r.id;
CREATE INDEX records_key ON records (inbox_id, substr(key, 1, 256)) WHERE key <> identity;
CREATE INDEX quarantine_key ON quarantine (inbox_id, substr(key, 1, 256))
WHERE key <> identity;
CREATE INDEX dead_letters_key ON dead_letters (inbox_id, substr(key, 1, 256))
WHERE key IS NOT NULL;
-- The log entries about a quarantined newcomer (its quarantine and its resolution) and
-- about a record after its seal (its eviction, a replay it came from), found by the id
-- their state names (a state that is not the JSON oncebox writes names none: it is never
-- refused). Partial: an accept or a duplicate writes no entry here.
CREATE INDEX log_quarantine ON log (
    (substring(state FROM '"quarantine":([0-9]{1,18})[,}]')::bigint)
)
WHERE step IN ('quarantine', 'resolve');
CREATE INDEX log_record ON log (
    (substring(state FROM '"record":([0-9]{1,18})[,}]')::bigint)
)
WHERE step IN ('evict', 'replay');
