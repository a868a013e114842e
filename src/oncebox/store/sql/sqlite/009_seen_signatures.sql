-- Migration 9 (SQLite): signed requests already seen, shared by every process that
-- serves this store, so a captured request cannot be replayed through another server
-- while its timestamp is fresh. Rows are dropped once their window has passed.
CREATE TABLE seen_signatures (
    signature  TEXT PRIMARY KEY,
    expires_at REAL NOT NULL
);
CREATE INDEX seen_signatures_expiry ON seen_signatures (expires_at);
