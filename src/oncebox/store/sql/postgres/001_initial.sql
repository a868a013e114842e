-- Migration 1 (PostgreSQL): inboxes, records (with their tombstones), revisions,
-- quarantine, dead letters, counters, apply-step state and retention history: the same
-- tables as the SQLite store, with the uniqueness rules enforced by constraints. Times
-- are seconds since the epoch read from the database clock (clock_timestamp()), never
-- from a client host.

CREATE TABLE inboxes (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name              text NOT NULL UNIQUE,
    codec             text NOT NULL,
    apply             text NOT NULL,
    retention_seconds double precision,
    tombstone_seconds double precision
);

-- I1: one row per identity per inbox, by constraint.
CREATE TABLE records (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    inbox_id     bigint NOT NULL REFERENCES inboxes(id),
    ident        bytea NOT NULL,
    identity     text,
    witness      bytea NOT NULL,
    revision     integer NOT NULL DEFAULT 1,
    content      bytea,
    fields       text,
    first_seen   double precision NOT NULL,
    last_seen    double precision NOT NULL,
    seen_count   bigint NOT NULL DEFAULT 1,
    evicted_at   double precision,
    late_replays bigint NOT NULL DEFAULT 0,
    max_lateness double precision NOT NULL DEFAULT 0,
    device_time  text,
    snapshot_id  text,
    delivery_id  text,
    CONSTRAINT records_one_per_identity UNIQUE (inbox_id, ident)
);
CREATE INDEX records_age ON records (inbox_id, first_seen);

CREATE TABLE revisions (
    record_id     bigint NOT NULL REFERENCES records(id),
    revision      integer NOT NULL,
    witness       bytea NOT NULL,
    content       bytea,
    fields        text,
    decided_at    double precision NOT NULL,
    superseded_at double precision NOT NULL,
    note          text,
    PRIMARY KEY (record_id, revision)
);

CREATE TABLE quarantine (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    inbox_id    bigint NOT NULL REFERENCES inboxes(id),
    ident       bytea NOT NULL,
    identity    text NOT NULL,
    record_id   bigint,
    witness     bytea NOT NULL,
    content     bytea NOT NULL,
    fields      text NOT NULL,
    reason      text NOT NULL,
    status      text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'kept', 'accepted')),
    note        text,
    first_seen  double precision NOT NULL,
    last_seen   double precision NOT NULL,
    seen_count  bigint NOT NULL DEFAULT 1,
    resolved_at double precision,
    device_time text,
    snapshot_id text,
    delivery_id text,
    CONSTRAINT quarantine_one_per_newcomer UNIQUE (inbox_id, ident, witness)
);
CREATE INDEX quarantine_status ON quarantine (inbox_id, status);

CREATE TABLE dead_letters (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    inbox_id    bigint NOT NULL REFERENCES inboxes(id),
    reason      text NOT NULL,
    detail      text NOT NULL,
    head        bytea NOT NULL,
    length      bigint NOT NULL,
    sha256      text NOT NULL,
    key         text,
    received_at double precision NOT NULL,
    device_time text,
    snapshot_id text,
    delivery_id text
);
CREATE INDEX dead_letters_inbox ON dead_letters (inbox_id, id);

CREATE TABLE verdict_counts (
    inbox_id bigint NOT NULL REFERENCES inboxes(id),
    hour     bigint NOT NULL,
    verdict  text NOT NULL,
    reason   text NOT NULL,
    n        bigint NOT NULL,
    PRIMARY KEY (inbox_id, hour, verdict, reason)
);

-- The generation apply step: one work key per (seller, sku, marketplace) per inbox.
CREATE TABLE work_keys (
    inbox_id           bigint NOT NULL REFERENCES inboxes(id),
    seller_id          text NOT NULL,
    sku                text NOT NULL,
    marketplace_id     text NOT NULL,
    generation         bigint NOT NULL,
    applied_generation bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (inbox_id, seller_id, sku, marketplace_id)
);

-- The triage apply step: the headcount ledger, one row per applied frame, and totals
-- kept per (site, need) that only ever move by a difference.
CREATE TABLE triage_ledger (
    record_id bigint PRIMARY KEY REFERENCES records(id),
    inbox_id  bigint NOT NULL REFERENCES inboxes(id),
    site      text NOT NULL,
    need      text NOT NULL,
    headcount bigint NOT NULL,
    pri       bigint NOT NULL
);
CREATE INDEX triage_ledger_rank ON triage_ledger (inbox_id, pri DESC);

CREATE TABLE triage_totals (
    inbox_id  bigint NOT NULL REFERENCES inboxes(id),
    site      text NOT NULL,
    need      text NOT NULL,
    headcount bigint NOT NULL,
    cases     bigint NOT NULL,
    PRIMARY KEY (inbox_id, site, need)
);

-- Retention history: every eviction and every override below the floor.
CREATE TABLE evictions (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    inbox_id   bigint NOT NULL REFERENCES inboxes(id),
    kind       text NOT NULL CHECK (kind IN ('record', 'tombstone')),
    ident      bytea NOT NULL,
    witness    bytea NOT NULL,
    first_seen double precision NOT NULL,
    evicted_at double precision NOT NULL
);

CREATE TABLE retention_overrides (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    inbox_id          bigint NOT NULL REFERENCES inboxes(id),
    retention_seconds double precision NOT NULL,
    reason            text NOT NULL,
    at                double precision NOT NULL
);
