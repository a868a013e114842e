-- Migration 19 (SQLite): records you can find by the key their delivery came with.
-- A record and a quarantined newcomer keep their delivery's key (NULL: none came, or
-- made before this migration, which could not know it). Where the key is the identity
-- (keyed and ussd-h1 inboxes, a json inbox identified by its key) the identity's own
-- unique index finds it already, so records_key and quarantine_key hold only the rows
-- whose key differs: an accepted delivery of such an inbox writes no index entry more.
-- An index holds a key's first 256 characters (PostgreSQL's b-tree entries are bounded;
-- the same expression here), the whole key compared on the row.
ALTER TABLE records ADD COLUMN key TEXT;
ALTER TABLE quarantine ADD COLUMN key TEXT;
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
    CASE WHEN json_valid(state) THEN json_extract(state, '$.quarantine') END
)
WHERE step IN ('quarantine', 'resolve');
CREATE INDEX log_record ON log (
    CASE WHEN json_valid(state) THEN json_extract(state, '$.record') END
)
WHERE step IN ('evict', 'replay');
