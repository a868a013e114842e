-- Migration 16 (PostgreSQL): one fence for everything that has one writer at a
-- time. A sender's scope of a lease-fenced inbox, the log's dedicated sealer and a
-- reconciler's claim on a work key were three mechanisms (the leases table, the sealer
-- row, columns of work_keys); they are leases of one kind now, each on a resource
-- (kind, owner, name), under the one token counter. What was held stays held.
CREATE TABLE fences (
    kind        text NOT NULL,     -- scope | sealer | work
    owner       bigint NOT NULL,   -- the inbox it belongs to (0: the store's own)
    name        text NOT NULL,     -- the scope, the work key; '' for the sealer
    token       bigint NOT NULL,
    holder      text,              -- a dedicated holder (a sealer, a worker), or none
    issued_at   double precision NOT NULL,
    expires_at  double precision NOT NULL,
    released_at double precision,
    PRIMARY KEY (kind, owner, name)
);
INSERT INTO fences
SELECT 'scope', inbox_id, scope, token, NULL, issued_at, expires_at, released_at FROM leases;
INSERT INTO fences SELECT 'sealer', 0, '', token, holder, 0, expires_at, NULL FROM sealer;
DROP TABLE leases;
DROP TABLE sealer;

-- The tables an apply step owns, and which of its migrations each store has applied.
CREATE TABLE step_schema (
    step       text NOT NULL,
    version    integer NOT NULL,
    applied_at double precision NOT NULL,
    PRIMARY KEY (step, version)
);
