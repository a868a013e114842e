-- Migration 7 (SQLite): API tokens for the HTTP service.
-- Only the SHA-256 of a token's secret is kept; the secret itself is shown once. A name
-- may be reused once its token is revoked, so uniqueness covers live tokens only.
CREATE TABLE api_tokens (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT NOT NULL,
    secret_hash BLOB NOT NULL UNIQUE,
    inboxes     TEXT NOT NULL,   -- JSON array of inbox names, or ["*"]
    scopes      TEXT NOT NULL,   -- JSON array of read | write | operator
    hmac_key    TEXT,            -- request-signing key, kept in the store when asked for
    created_at  REAL NOT NULL,
    revoked_at  REAL
);
CREATE UNIQUE INDEX api_tokens_live_name ON api_tokens (name) WHERE revoked_at IS NULL;
