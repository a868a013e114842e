-- Migration 4 (PostgreSQL): log events wait in a queue until the sealer appends them,
-- so writers never contend for the log head; one sealer row fences stale sealers.

CREATE TABLE log_pending (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    step      text NOT NULL,
    state     text NOT NULL,
    record_id bigint            -- set for a record's seal
);

CREATE TABLE sealer (
    id         integer PRIMARY KEY CHECK (id = 1),
    token      bigint NOT NULL DEFAULT 0,
    holder     text,
    expires_at double precision NOT NULL DEFAULT 0
);
INSERT INTO sealer (id) VALUES (1);
