-- Migration 1 (SQLite): inboxes, records (with their tombstones), revisions,
-- quarantine, dead letters, counters, apply-step state and retention history.

CREATE TABLE inboxes (
    id                INTEGER PRIMARY KEY,
    name              TEXT NOT NULL UNIQUE,
    codec             TEXT NOT NULL,
    apply             TEXT NOT NULL,
    retention_seconds REAL,            -- NULL: kept forever
    tombstone_seconds REAL             -- NULL: tombstones kept forever
);

-- One row per identity per inbox (I1), enforced by the unique key. An evicted record
-- stays as a tombstone: content, identity text and fields dropped, digests kept.
CREATE TABLE records (
    id           INTEGER PRIMARY KEY,
    inbox_id     INTEGER NOT NULL REFERENCES inboxes(id),
    ident        BLOB NOT NULL,        -- SHA-256 of the identity
    identity     TEXT,                 -- the identity itself; NULL once evicted
    witness      BLOB NOT NULL,        -- SHA-256 of the canonical content
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
    UNIQUE (inbox_id, ident)
);
CREATE INDEX records_age ON records (inbox_id, first_seen);

-- Superseded revisions of a record, kept when an operator accepts a newcomer.
CREATE TABLE revisions (
    record_id     INTEGER NOT NULL REFERENCES records(id),
    revision      INTEGER NOT NULL,
    witness       BLOB NOT NULL,
    content       BLOB,
    fields        TEXT,
    decided_at    REAL NOT NULL,
    superseded_at REAL NOT NULL,
    note          TEXT,
    PRIMARY KEY (record_id, revision)
);

-- Conflicting newcomers: same identity, different content. One row per distinct
-- newcomer; a repeat of it only counts.
CREATE TABLE quarantine (
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
    UNIQUE (inbox_id, ident, witness)
);
CREATE INDEX quarantine_status ON quarantine (inbox_id, status);

-- Invalid deliveries: a bounded copy, its full length and digest, and the reason.
CREATE TABLE dead_letters (
    id          INTEGER PRIMARY KEY,
    inbox_id    INTEGER NOT NULL REFERENCES inboxes(id),
    reason      TEXT NOT NULL,
    detail      TEXT NOT NULL,
    head        BLOB NOT NULL,
    length      INTEGER NOT NULL,
    sha256      TEXT NOT NULL,
    key         TEXT,
    received_at REAL NOT NULL,
    device_time TEXT,
    snapshot_id TEXT,
    delivery_id TEXT
);
CREATE INDEX dead_letters_inbox ON dead_letters (inbox_id, id);

CREATE TABLE verdict_counts (
    inbox_id INTEGER NOT NULL REFERENCES inboxes(id),
    hour     INTEGER NOT NULL,
    verdict  TEXT NOT NULL,
    reason   TEXT NOT NULL,
    n        INTEGER NOT NULL,
    PRIMARY KEY (inbox_id, hour, verdict, reason)
) WITHOUT ROWID;

-- The generation apply step's work keys (docs/concepts.md#work-keys).
CREATE TABLE work_keys (
    inbox_id           INTEGER NOT NULL REFERENCES inboxes(id),
    seller_id          TEXT NOT NULL,
    sku                TEXT NOT NULL,
    marketplace_id     TEXT NOT NULL,
    generation         INTEGER NOT NULL,
    applied_generation INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (inbox_id, seller_id, sku, marketplace_id)
) WITHOUT ROWID;

-- The triage apply step's headcount ledger (docs/concepts.md#triage-ledger), one row per
-- applied frame, and totals kept per (site, need) that only ever move by a difference.
CREATE TABLE triage_ledger (
    record_id INTEGER PRIMARY KEY REFERENCES records(id),
    inbox_id  INTEGER NOT NULL REFERENCES inboxes(id),
    site      TEXT NOT NULL,
    need      TEXT NOT NULL,
    headcount INTEGER NOT NULL,
    pri       INTEGER NOT NULL
);
CREATE INDEX triage_ledger_rank ON triage_ledger (inbox_id, pri DESC);

CREATE TABLE triage_totals (
    inbox_id  INTEGER NOT NULL REFERENCES inboxes(id),
    site      TEXT NOT NULL,
    need      TEXT NOT NULL,
    headcount INTEGER NOT NULL,
    cases     INTEGER NOT NULL,
    PRIMARY KEY (inbox_id, site, need)
) WITHOUT ROWID;

-- Retention history: every eviction and every override below the floor.
CREATE TABLE evictions (
    id         INTEGER PRIMARY KEY,
    inbox_id   INTEGER NOT NULL REFERENCES inboxes(id),
    kind       TEXT NOT NULL CHECK (kind IN ('record', 'tombstone')),
    ident      BLOB NOT NULL,
    witness    BLOB NOT NULL,
    first_seen REAL NOT NULL,
    evicted_at REAL NOT NULL
);

CREATE TABLE retention_overrides (
    id                INTEGER PRIMARY KEY,
    inbox_id          INTEGER NOT NULL REFERENCES inboxes(id),
    retention_seconds REAL NOT NULL,
    reason            TEXT NOT NULL,
    at                REAL NOT NULL
);
