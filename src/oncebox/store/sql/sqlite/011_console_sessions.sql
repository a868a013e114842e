-- Migration 11 (SQLite): console sessions, kept on the server.
-- The console's cookie holds only a random session id. The store keeps its SHA-256 (a
-- leaked database holds no usable session), the token it belongs to and its expiry on
-- the server clock: the cookie's holder cannot stretch its age, signing out ends it for
-- every copy of the cookie, and revoking the token ends all of its sessions.
CREATE TABLE console_sessions (
    id_hash    BLOB PRIMARY KEY,
    token_id   INTEGER NOT NULL REFERENCES api_tokens(id),
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL
);
CREATE INDEX console_sessions_token ON console_sessions (token_id);
CREATE INDEX console_sessions_expiry ON console_sessions (expires_at);
