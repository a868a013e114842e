-- generation, migration 1 (SQLite): one work key per (seller, sku, marketplace) per
-- inbox, its generation and the reconciler's state. IF NOT EXISTS: stores made before
-- the step owned its tables have it already, from the store's own migrations.
CREATE TABLE IF NOT EXISTS work_keys (
    inbox_id            INTEGER NOT NULL REFERENCES inboxes(id),
    seller_id           TEXT NOT NULL,
    sku                 TEXT NOT NULL,
    marketplace_id      TEXT NOT NULL,
    generation          INTEGER NOT NULL,
    applied_generation  INTEGER NOT NULL DEFAULT 0,
    document            TEXT,
    document_generation INTEGER,
    applied_token       INTEGER,
    refreshed_at        REAL,
    claim_token         INTEGER,
    claim_generation    INTEGER,
    claimed_by          TEXT,
    claim_expires       REAL,
    failures            INTEGER NOT NULL DEFAULT 0,
    next_attempt        REAL NOT NULL DEFAULT 0,
    last_error          TEXT,
    in_review           INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (inbox_id, seller_id, sku, marketplace_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS work_keys_due ON work_keys (inbox_id, in_review, next_attempt)
    WHERE generation > applied_generation;
