-- Migration 10 (SQLite): fewer pages written per delivery.
-- * records: ids are reserved by the writer (reserve_record_ids) instead of AUTOINCREMENT,
--   whose sqlite_sequence row cost a page in every transaction that inserted. Ids are
--   still never reused: the highest id retention ever dropped is kept in meta
--   (record_ids_used), and reservations start above it.
-- * the ledger's ranking index goes: the ranking reads an inbox's whole ledger anyway,
--   and the index cost a page per applied frame.
-- * Merkle nodes are kept at levels 4, 8, 12, ... only (see engine/log.py); the others
--   are rebuilt from those and from the log entries themselves.
PRAGMA defer_foreign_keys = ON;

INSERT INTO meta (key, value)
SELECT 'record_ids_used', CAST(seq AS TEXT) FROM sqlite_sequence WHERE name = 'records'
ON CONFLICT (key) DO UPDATE SET value = excluded.value;

CREATE TABLE records_new (
    id           INTEGER PRIMARY KEY,
    inbox_id     INTEGER NOT NULL REFERENCES inboxes(id),
    ident        BLOB NOT NULL,
    identity     TEXT,
    witness      BLOB NOT NULL,
    revision     INTEGER NOT NULL DEFAULT 1,
    content      BLOB,
    fields       TEXT,
    first_seen   REAL NOT NULL,
    last_seen    REAL NOT NULL,
    seen_count   INTEGER NOT NULL DEFAULT 1,
    evicted_at   REAL,
    late_replays INTEGER NOT NULL DEFAULT 0,
    max_lateness REAL NOT NULL DEFAULT 0,
    device_time  TEXT,
    snapshot_id  TEXT,
    delivery_id  TEXT,
    log_seq      INTEGER,
    revised_at   REAL,
    UNIQUE (inbox_id, ident)
);
INSERT INTO records_new SELECT id, inbox_id, ident, identity, witness, revision, content,
    fields, first_seen, last_seen, seen_count, evicted_at, late_replays, max_lateness,
    device_time, snapshot_id, delivery_id, log_seq, revised_at
FROM records;
DROP TABLE records;
ALTER TABLE records_new RENAME TO records;
CREATE INDEX records_age ON records (inbox_id, first_seen);
CREATE INDEX records_unsealed ON records (id) WHERE log_seq IS NULL;

DROP INDEX triage_ledger_rank;

DELETE FROM merkle_nodes WHERE level = 0 OR level % 4 != 0;
