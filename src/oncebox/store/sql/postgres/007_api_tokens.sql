-- Migration 7 (PostgreSQL): API tokens for the HTTP service.
-- Only the SHA-256 of a token's secret is kept; the secret itself is shown once. A name
-- may be reused once its token is revoked, so uniqueness covers live tokens only.
CREATE TABLE api_tokens (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text NOT NULL,
    secret_hash bytea NOT NULL UNIQUE,
    inboxes     text NOT NULL,   -- JSON array of inbox names, or ["*"]
    scopes      text NOT NULL,   -- JSON array of read | write | operator
    hmac_key    text,            -- request-signing key, kept in the store when asked for
    created_at  double precision NOT NULL,
    revoked_at  double precision
);
CREATE UNIQUE INDEX api_tokens_live_name ON api_tokens (name) WHERE revoked_at IS NULL;
