-- Migration 3 (PostgreSQL): the reconciler's state on each work key.
-- dirty = generation > applied_generation. A claim is a lease on one key: its token
-- comes from the store's one fencing counter (one claim per token), its expiry is on
-- the server clock.
ALTER TABLE work_keys
    ADD COLUMN document            text,              -- last accepted read
    ADD COLUMN document_generation bigint,
    ADD COLUMN applied_token       bigint,            -- the claim that applied it
    ADD COLUMN refreshed_at        double precision,
    ADD COLUMN claim_token         bigint UNIQUE,
    ADD COLUMN claim_generation    bigint,
    ADD COLUMN claimed_by          text,
    ADD COLUMN claim_expires       double precision,
    ADD COLUMN failures            integer NOT NULL DEFAULT 0,
    ADD COLUMN next_attempt        double precision NOT NULL DEFAULT 0,
    ADD COLUMN last_error          text,
    ADD COLUMN in_review           integer NOT NULL DEFAULT 0;

CREATE INDEX work_keys_due ON work_keys (inbox_id, in_review, next_attempt);
