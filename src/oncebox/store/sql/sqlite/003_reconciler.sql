-- Migration 3 (SQLite): the reconciler's state on each work key.
-- dirty = generation > applied_generation. A claim is a lease on one key: its token
-- comes from the store's one fencing counter, its expiry is on the server clock.

ALTER TABLE work_keys ADD COLUMN document TEXT;            -- last accepted read
ALTER TABLE work_keys ADD COLUMN document_generation INTEGER;
ALTER TABLE work_keys ADD COLUMN applied_token INTEGER;    -- the claim that applied it
ALTER TABLE work_keys ADD COLUMN refreshed_at REAL;
ALTER TABLE work_keys ADD COLUMN claim_token INTEGER;
ALTER TABLE work_keys ADD COLUMN claim_generation INTEGER;
ALTER TABLE work_keys ADD COLUMN claimed_by TEXT;
ALTER TABLE work_keys ADD COLUMN claim_expires REAL;
ALTER TABLE work_keys ADD COLUMN failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE work_keys ADD COLUMN next_attempt REAL NOT NULL DEFAULT 0;
ALTER TABLE work_keys ADD COLUMN last_error TEXT;
ALTER TABLE work_keys ADD COLUMN in_review INTEGER NOT NULL DEFAULT 0;

CREATE INDEX work_keys_due ON work_keys (inbox_id, in_review, next_attempt);
