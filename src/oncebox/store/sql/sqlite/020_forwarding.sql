-- Migration 20 (SQLite): forwarding through a transactional outbox.
-- Forwarding: each accepted revision owed to each of its inbox's destinations, written
-- in the transaction that accepted it (the outbox), so a record and its pending
-- forwards commit together or not at all. A dispatcher's claim on one is a lease of the
-- one fence (kind 'forward', owner its inbox, named by its id), not a column here.
-- status: pending (no attempt yet), failed (retrying), delivered, dead (given up).
-- order_key: the record's identity under ordered = "key" (NULL otherwise).
CREATE TABLE forwards (
    id          INTEGER PRIMARY KEY,
    inbox_id    INTEGER NOT NULL REFERENCES inboxes(id),
    destination TEXT NOT NULL,
    record_id   INTEGER NOT NULL,
    revision    INTEGER NOT NULL,
    order_key   TEXT,
    status      TEXT NOT NULL DEFAULT 'pending'
                CHECK (status IN ('pending', 'failed', 'delivered', 'dead')),
    attempts    INTEGER NOT NULL DEFAULT 0,
    schedule_at INTEGER NOT NULL DEFAULT 0,  -- attempts when its schedule began
    next_at     REAL NOT NULL,
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL,
    last_status INTEGER,
    last_error  TEXT,
    finished_at REAL
);
-- What a dispatcher claims next: the unfinished, by when they are due.
CREATE INDEX forwards_due ON forwards (destination, next_at)
    WHERE status IN ('pending', 'failed');
-- Under ordered = "key", the head of each key: the oldest unfinished one.
CREATE INDEX forwards_heads ON forwards (destination, order_key, id)
    WHERE order_key IS NOT NULL AND status IN ('pending', 'failed');
-- Listings by destination and status, and a record's forwards.
CREATE INDEX forwards_listed ON forwards (destination, status, id);
CREATE INDEX forwards_record ON forwards (record_id);

-- Every attempt at a forward, as it went: its answer's status and first 1 KiB, its
-- error, its latency, and when the next one is due. A stale one (its claim lost to
-- another dispatcher meanwhile) is kept too.
CREATE TABLE forward_attempts (
    id         INTEGER PRIMARY KEY,
    forward_id INTEGER NOT NULL,
    number     INTEGER NOT NULL,
    at         REAL NOT NULL,
    outcome    TEXT NOT NULL,
    status     INTEGER,
    latency    REAL NOT NULL,
    answer     BLOB,
    error      TEXT,
    next_at    REAL,
    dispatcher TEXT NOT NULL
);
CREATE INDEX forward_attempts_forward ON forward_attempts (forward_id, id);

-- A destination's state shared by every dispatcher: paused by an operator, and its
-- circuit breaker (closed, open until open_until, or half-open with one probe out).
CREATE TABLE forward_destinations (
    name       TEXT PRIMARY KEY,
    inbox_id   INTEGER NOT NULL REFERENCES inboxes(id),
    paused_at  REAL,
    paused_by  TEXT,
    circuit    TEXT NOT NULL DEFAULT 'closed',
    failures   INTEGER NOT NULL DEFAULT 0,
    open_until REAL
);

-- Attempts counted per destination, hour and outcome (a success rate without a scan).
CREATE TABLE forward_counts (
    destination TEXT NOT NULL,
    hour        INTEGER NOT NULL,
    outcome     TEXT NOT NULL,
    n           INTEGER NOT NULL,
    PRIMARY KEY (destination, hour, outcome)
) WITHOUT ROWID;
