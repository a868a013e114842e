-- Migration 6 (SQLite):
-- * record ids are never reused (AUTOINCREMENT): a log entry or quarantine row that names
--   a record id must keep meaning that record after retention drops its tombstone;
-- * the triage ledger no longer points at records by foreign key: its rows are applied
--   effects, which outlive the dedup state that retention drops;
-- * revised_at: when the current revision was decided.
PRAGMA defer_foreign_keys = ON;

CREATE TABLE records_new (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
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
INSERT INTO records_new (id, inbox_id, ident, identity, witness, revision, content, fields,
                         first_seen, last_seen, seen_count, evicted_at, late_replays,
                         max_lateness, device_time, snapshot_id, delivery_id, log_seq)
SELECT id, inbox_id, ident, identity, witness, revision, content, fields, first_seen,
       last_seen, seen_count, evicted_at, late_replays, max_lateness, device_time,
       snapshot_id, delivery_id, log_seq
FROM records;
DROP TABLE records;
ALTER TABLE records_new RENAME TO records;
CREATE INDEX records_age ON records (inbox_id, first_seen);
CREATE INDEX records_unsealed ON records (id) WHERE log_seq IS NULL;

CREATE TABLE triage_ledger_new (
    record_id INTEGER PRIMARY KEY,
    inbox_id  INTEGER NOT NULL REFERENCES inboxes(id),
    site      TEXT NOT NULL,
    need      TEXT NOT NULL,
    headcount INTEGER NOT NULL,
    pri       INTEGER NOT NULL
);
INSERT INTO triage_ledger_new SELECT record_id, inbox_id, site, need, headcount, pri
FROM triage_ledger;
DROP TABLE triage_ledger;
ALTER TABLE triage_ledger_new RENAME TO triage_ledger;
CREATE INDEX triage_ledger_rank ON triage_ledger (inbox_id, pri DESC);
