-- Migration 4 (SQLite): log events wait in a queue until the sealer appends them,
-- so writers never contend for the log head; one sealer row fences stale sealers.

CREATE TABLE log_pending (
    id        INTEGER PRIMARY KEY,
    step      TEXT NOT NULL,
    state     TEXT NOT NULL,
    record_id INTEGER            -- set for a record's seal
);

CREATE TABLE sealer (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    token      INTEGER NOT NULL DEFAULT 0,
    holder     TEXT,
    expires_at REAL NOT NULL DEFAULT 0
);
INSERT INTO sealer (id) VALUES (1);
