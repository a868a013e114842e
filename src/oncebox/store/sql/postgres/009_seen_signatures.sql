-- Migration 9 (PostgreSQL): signed requests already seen, shared by every process
-- and host that serves this store, so a captured request cannot be replayed through
-- another server while its timestamp is fresh. Rows are dropped once their window passed.
CREATE TABLE seen_signatures (
    signature  text PRIMARY KEY,
    expires_at double precision NOT NULL
);
CREATE INDEX seen_signatures_expiry ON seen_signatures (expires_at);
