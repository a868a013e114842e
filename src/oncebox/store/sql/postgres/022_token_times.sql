-- Migration 22 (PostgreSQL): a token may expire (expires_at, on the server clock; NULL:
-- never), and when it was last used is kept (written at most once a minute per token).
ALTER TABLE api_tokens ADD COLUMN expires_at double precision;
ALTER TABLE api_tokens ADD COLUMN last_used_at double precision;
