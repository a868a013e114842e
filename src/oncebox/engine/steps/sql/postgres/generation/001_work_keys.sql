-- generation, migration 1 (PostgreSQL): one work key per (seller, sku, marketplace) per
-- inbox, its generation and the reconciler's state. IF NOT EXISTS: stores made before
-- the step owned its tables have it already, from the store's own migrations.
CREATE TABLE IF NOT EXISTS work_keys (
    inbox_id            bigint NOT NULL REFERENCES inboxes(id),
    seller_id           text NOT NULL,
    sku                 text NOT NULL,
    marketplace_id      text NOT NULL,
    generation          bigint NOT NULL,
    applied_generation  bigint NOT NULL DEFAULT 0,
    document            text,
    document_generation bigint,
    applied_token       bigint,
    refreshed_at        double precision,
    claim_token         bigint UNIQUE,
    claim_generation    bigint,
    claimed_by          text,
    claim_expires       double precision,
    failures            integer NOT NULL DEFAULT 0,
    next_attempt        double precision NOT NULL DEFAULT 0,
    last_error          text,
    in_review           integer NOT NULL DEFAULT 0,
    PRIMARY KEY (inbox_id, seller_id, sku, marketplace_id)
);
CREATE INDEX IF NOT EXISTS work_keys_due ON work_keys (inbox_id, in_review, next_attempt)
    WHERE generation > applied_generation;
