-- Migration 2 (SQLite): leases with fencing tokens, the checkpoint log with its
-- Merkle nodes, and each record's seal.

-- One strictly increasing counter per store: every lease gets the next token.
CREATE TABLE counters (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
INSERT INTO counters (name, value) VALUES ('lease_token', 0);

-- The current lease of each scope; a new lease replaces the row, fencing every older
-- token at once.
CREATE TABLE leases (
    inbox_id    INTEGER NOT NULL REFERENCES inboxes(id),
    scope       TEXT NOT NULL,
    token       INTEGER NOT NULL UNIQUE,
    issued_at   REAL NOT NULL,
    expires_at  REAL NOT NULL,
    released_at REAL,
    PRIMARY KEY (inbox_id, scope)
);

-- The append-only log: hash = SHA-256(prev | step | state), seq from 1 without gaps.
CREATE TABLE log (
    seq   INTEGER PRIMARY KEY,
    step  TEXT NOT NULL,
    state TEXT NOT NULL,
    hash  TEXT NOT NULL
);

-- Complete, aligned Merkle subtrees over the log (level 0: leaf hashes).
CREATE TABLE merkle_nodes (
    level INTEGER NOT NULL,
    idx   INTEGER NOT NULL,
    hash  BLOB NOT NULL,
    PRIMARY KEY (level, idx)
) WITHOUT ROWID;

ALTER TABLE inboxes ADD COLUMN fenced INTEGER NOT NULL DEFAULT 0;
ALTER TABLE records ADD COLUMN log_seq INTEGER;
CREATE INDEX records_unsealed ON records (id) WHERE log_seq IS NULL;

-- Facts about the store itself; store_id names it in signed checkpoints.
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO meta (key, value) VALUES ('store_id', lower(hex(randomblob(16))));
