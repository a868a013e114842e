-- Migration 30 (SQLite): one OPEN quarantine row per distinct newcomer, not one row ever.
-- A newcomer's row closed by an operator (kept or accepted) took every later resend of
-- it as a repeat, counted on the closed row: no open conflict, no warning, though the
-- sender still disagreed with the record (which an accept may since have moved past).
-- Such a resend now opens a row of its own. SQLite cannot drop a table's UNIQUE
-- constraint, so the table is made again without it (same columns, same order); the
-- newcomer's index stays for the reads by identity, and a partial unique index keeps
-- one open row per newcomer.
PRAGMA defer_foreign_keys = ON;

CREATE TABLE quarantine_new (
    id          INTEGER PRIMARY KEY,
    inbox_id    INTEGER NOT NULL REFERENCES inboxes(id),
    ident       BLOB NOT NULL,
    identity    TEXT NOT NULL,
    record_id   INTEGER,
    witness     BLOB NOT NULL,
    content     BLOB NOT NULL,
    fields      TEXT NOT NULL,
    reason      TEXT NOT NULL,
    status      TEXT NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'kept', 'accepted')),
    note        TEXT,
    first_seen  REAL NOT NULL,
    last_seen   REAL NOT NULL,
    seen_count  INTEGER NOT NULL DEFAULT 1,
    resolved_at REAL,
    device_time TEXT,
    snapshot_id TEXT,
    delivery_id TEXT,
    resolved_by TEXT,
    signature   TEXT,
    key         TEXT
);
INSERT INTO quarantine_new (id, inbox_id, ident, identity, record_id, witness, content,
                            fields, reason, status, note, first_seen, last_seen, seen_count,
                            resolved_at, device_time, snapshot_id, delivery_id, resolved_by,
                            signature, key)
SELECT id, inbox_id, ident, identity, record_id, witness, content, fields, reason, status,
       note, first_seen, last_seen, seen_count, resolved_at, device_time, snapshot_id,
       delivery_id, resolved_by, signature, key
FROM quarantine;
DROP TABLE quarantine;
ALTER TABLE quarantine_new RENAME TO quarantine;
CREATE INDEX quarantine_newcomer ON quarantine (inbox_id, ident, witness);
CREATE UNIQUE INDEX quarantine_one_open ON quarantine (inbox_id, ident, witness)
WHERE status = 'open';
CREATE INDEX quarantine_status ON quarantine (inbox_id, status);
CREATE INDEX quarantine_key ON quarantine (inbox_id, substr(key, 1, 256))
WHERE key <> identity;
