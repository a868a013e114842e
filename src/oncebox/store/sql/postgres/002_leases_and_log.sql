-- Migration 2 (PostgreSQL): leases with fencing tokens, the checkpoint log with its
-- Merkle nodes, and each record's seal.

-- One strictly increasing counter per store: every lease gets the next token.
CREATE TABLE counters (
    name  text PRIMARY KEY,
    value bigint NOT NULL
);
INSERT INTO counters (name, value) VALUES ('lease_token', 0);

-- One current lease per scope, by the primary key; tokens unique across the store.
CREATE TABLE leases (
    inbox_id    bigint NOT NULL REFERENCES inboxes(id),
    scope       text NOT NULL,
    token       bigint NOT NULL UNIQUE,
    issued_at   double precision NOT NULL,
    expires_at  double precision NOT NULL,
    released_at double precision,
    PRIMARY KEY (inbox_id, scope)
);

-- The append-only log: hash = SHA-256(prev | step | state), seq from 1 without gaps.
CREATE TABLE log (
    seq   bigint PRIMARY KEY,
    step  text NOT NULL,
    state text NOT NULL,
    hash  text NOT NULL
);

-- Complete, aligned Merkle subtrees over the log (level 0: leaf hashes).
CREATE TABLE merkle_nodes (
    level integer NOT NULL,
    idx   bigint NOT NULL,
    hash  bytea NOT NULL,
    PRIMARY KEY (level, idx)
);

ALTER TABLE inboxes ADD COLUMN fenced boolean NOT NULL DEFAULT false;
ALTER TABLE records ADD COLUMN log_seq bigint;
CREATE INDEX records_unsealed ON records (id) WHERE log_seq IS NULL;

-- Facts about the store itself; store_id names it in signed checkpoints.
CREATE TABLE meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);
INSERT INTO meta (key, value) VALUES ('store_id', md5(random()::text || clock_timestamp()::text));
