-- The PostgreSQL store's whole schema as it stands after every migration in this
-- folder: what a new store is made with, in one transaction, every migration then
-- recorded as applied. An existing store gets here through the migrations instead, and
-- tests/test_schema.py checks that both roads end in the same database (pg_dump's
-- --schema-only of each). A change is a new migration and the same change here.
--
-- The apply steps' tables (the triage ledger, the work keys) are not here: each step
-- makes its own, with its own migrations, once an inbox uses it.
--
-- Uniqueness lives in constraints, so no interleaving of clients can break it. Times
-- are seconds since the epoch read from the database clock (clock_timestamp()), never
-- from a client host. Digests (ident, witness) are SHA-256, kept as 32 bytes.

-- An inbox: a named intake, its codec, apply step and retention. What a dropped
-- tombstone had counted stays on its inbox (dropped_*), so its counts never go down.
CREATE TABLE inboxes (
    id                   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name                 text NOT NULL UNIQUE,
    codec                text NOT NULL,
    apply                text NOT NULL,
    retention_seconds    double precision,   -- NULL: kept forever
    tombstone_seconds    double precision,   -- NULL: tombstones kept forever
    fenced               boolean NOT NULL DEFAULT false,
    dropped_duplicates   bigint NOT NULL DEFAULT 0,
    dropped_late_replays bigint NOT NULL DEFAULT 0,
    dropped_max_lateness double precision NOT NULL DEFAULT 0
);

-- I1: one row per identity per inbox, by constraint. An evicted record stays as a
-- tombstone: content, identity text and fields dropped, digests kept. Ids come from the
-- identity's sequence (reserve_record_ids), which never goes back.
CREATE TABLE records (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    inbox_id     bigint NOT NULL REFERENCES inboxes(id),
    ident        bytea NOT NULL,       -- SHA-256 of the identity
    identity     text,                 -- the identity itself; NULL once evicted
    witness      bytea NOT NULL,       -- SHA-256 of the canonical content
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
    log_seq      bigint,               -- NULL: unsealed; -1: see seal_positions
    revised_at   double precision,     -- when the current revision was decided
    signature    text,                 -- what a verified webhook signature vouched for
    key          text,                 -- the delivery's key (NULL: none, or unknown)
    CONSTRAINT records_one_per_identity UNIQUE (inbox_id, ident)
);
-- Led by first_seen, not inbox_id: led by inbox_id it competed with the identity
-- constraint's index, and a generic plan made before a fresh store had statistics could
-- pick it for identity lookups.
CREATE INDEX records_age ON records (first_seen);
CREATE INDEX records_unsealed ON records (id) WHERE log_seq IS NULL;
-- A record's delivery key, where it is not the identity (whose own index finds it): an
-- accepted delivery keyed by its identity writes no entry here. The first 256 characters
-- of a key are indexed (a b-tree entry is bounded), the whole key compared on the row.
CREATE INDEX records_key ON records (inbox_id, substr(key, 1, 256)) WHERE key <> identity;

-- A seal writes a narrow row here instead of rewriting the record it seals (a rewrite
-- copies the whole record and adds an entry to each of its indexes). A record decided
-- with its seal queued is inserted with log_seq = -1, "sealed through the queue": it
-- always has a queued event or a row here.
CREATE TABLE seal_positions (
    record_id bigint PRIMARY KEY,
    seq       bigint NOT NULL
);

-- Every read of a record's log position goes through this view, the one place that
-- says where the position is kept. PostgreSQL inlines it, so a read costs what the join
-- written out would. A column added to records is added here too, at the end (CREATE OR
-- REPLACE VIEW); a migration that rebuilds records drops the view first and makes it
-- again after.
CREATE VIEW records_read AS
SELECT r.id, r.inbox_id, r.ident, r.identity, r.witness, r.revision, r.content, r.fields,
       r.first_seen, r.last_seen, r.seen_count, r.evicted_at, r.late_replays,
       r.max_lateness, r.device_time, r.snapshot_id, r.delivery_id,
       CASE WHEN r.log_seq = -1 THEN sp.seq ELSE r.log_seq END AS log_seq,
       r.revised_at, r.signature, r.key
FROM records r LEFT JOIN seal_positions sp ON r.log_seq = -1 AND sp.record_id = r.id;

-- The records' identity column draws from records_id_seq, the name PostgreSQL gave it
-- when the table was made: decision_reads_locked names it, where it looked it up by
-- table and column for every fresh id (a catalog scan each, a third of the lookup's
-- time). A store whose sequence is named otherwise is refused here, not misnumbered.
DO $$
BEGIN
  IF pg_get_serial_sequence('records', 'id')::regclass <> 'records_id_seq'::regclass THEN
    RAISE EXCEPTION 'the records'' id sequence is %, not records_id_seq',
      pg_get_serial_sequence('records', 'id');
  END IF;
END
$$;

-- What a decision reads, in one statement, for an inbox that is not lease-fenced: the
-- inbox's shared lock (with the relaxed beginning's SET LOCAL where asked), then, in a
-- query of its own, decision_lookup's rows (the clock, the stored records, the fresh
-- ids). A function, because a statement reads the snapshot taken as it starts, before
-- the lock is granted; inside a VOLATILE function at READ COMMITTED each query takes a
-- new one, so the lookup sees what committed while the lock was waited for, as it did
-- when it came in the statement after the lock's. The decision itself stays in Python.
-- Each identity is looked up on its own (a lateral subquery the planner keeps apart):
-- by the whole identity index, whatever the statistics say (migration 25). The
-- identities come as a bytea[], read through a scalar subquery so that one generic
-- plan serves every call (migration 26). The identities not found get fresh ids, found
-- by a hash of the found ones (migration 28).
CREATE FUNCTION decision_reads_locked(p_inbox integer, p_idents bytea[], p_relaxed boolean)
RETURNS TABLE (kind text, id bigint, ident bytea, witness bytea, revision integer,
               evicted_at double precision, first_seen double precision, log_seq bigint)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
  PERFORM pg_advisory_xact_lock_shared(3, p_inbox);
  IF p_relaxed THEN
    PERFORM set_config('synchronous_commit', 'off', true);
  END IF;
  RETURN QUERY
  WITH wanted AS (
    SELECT DISTINCT w.ident FROM unnest((SELECT p_idents)) AS w(ident)
  ), found AS (
    SELECT 'stored'::text AS kind, r.id, r.ident, r.witness, r.revision, r.evicted_at,
           r.first_seen, r.log_seq
    FROM wanted w CROSS JOIN LATERAL (
      SELECT * FROM records_read s WHERE s.inbox_id = p_inbox AND s.ident = w.ident OFFSET 0
    ) r
  )
  SELECT f.kind, f.id, f.ident, f.witness, f.revision, f.evicted_at, f.first_seen, f.log_seq
  FROM found f
  UNION ALL
  SELECT 'fresh'::text, nextval('records_id_seq'::regclass), NULL::bytea,
         NULL::bytea, NULL::integer, NULL::double precision, NULL::double precision,
         NULL::bigint
  FROM wanted w
  WHERE w.ident NOT IN (SELECT f.ident FROM found f)
  UNION ALL
  SELECT 'clock'::text, NULL::bigint, NULL::bytea, NULL::bytea, NULL::integer,
         NULL::double precision, extract(epoch FROM clock_timestamp())::double precision,
         NULL::bigint;
END;
$$;

-- What a seal reads, in one statement: the log's lease, held (FOR UPDATE; with the
-- connection's own synchronous_commit set back, SET LOCAL, where p_level is given: a
-- transaction begun relaxed that appends commits durably), then, in queries of their
-- own (each a new snapshot, taken once the lease is held), what seal_reads gives: the
-- clock, the queue's next p_limit events, the log's last block of p_block entries and
-- the kept Merkle nodes. The lease comes as kind 'lease' (owner in a, token in b, name
-- in step, holder in state, issued_at in clock). It reads; the seal hashes in Python.
-- Each level's kept nodes are read by their whole key, (level, index) in a range, in a
-- lateral subquery the planner keeps apart, and the log's last block in position order,
-- a block at most, so that only the log's index reads it (migration 25). Given the
-- position and chain hash of the connection's last append (p_seq, p_hash), where the
-- log still ends there, its head comes alone (kind 'head'): the connection's kept edge
-- is the tree's, so neither block nor nodes are read (migration 26).
CREATE FUNCTION seal_reads_held(p_level text, p_limit integer, p_block integer,
                                p_seq bigint DEFAULT NULL, p_hash text DEFAULT NULL)
RETURNS TABLE (kind text, a bigint, b bigint, step text, state text, hash text,
               node bytea, record_id bigint, revision bigint, inbox_id bigint,
               clock double precision, expires_at double precision,
               released_at double precision)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
  IF p_level IS NOT NULL THEN
    PERFORM set_config('synchronous_commit', p_level, true);
  END IF;
  RETURN QUERY
  SELECT 'lease'::text, f.owner, f.token, f.name, f.holder, NULL::text, NULL::bytea,
         NULL::bigint, NULL::bigint, NULL::bigint, f.issued_at, f.expires_at, f.released_at
  FROM fences f
  WHERE f.kind = 'sealer' AND f.owner = 0 AND f.name = ''
  FOR UPDATE;
  RETURN QUERY
  SELECT 'clock'::text, NULL::bigint, NULL::bigint, NULL::text, NULL::text, NULL::text,
         NULL::bytea, NULL::bigint, NULL::bigint, NULL::bigint,
         extract(epoch FROM clock_timestamp())::double precision, NULL::double precision,
         NULL::double precision;
  RETURN QUERY
  SELECT 'pending'::text, p.id, NULL::bigint, p.step, p.state, NULL::text, NULL::bytea,
         p.record_id, p.revision, p.inbox_id, NULL::double precision,
         NULL::double precision, NULL::double precision
  FROM log_pending p ORDER BY p.id LIMIT p_limit;
  IF p_seq IS NOT NULL THEN
    RETURN QUERY
    SELECT 'head'::text, l.seq, NULL::bigint, l.step, l.state, l.hash, NULL::bytea,
           NULL::bigint, NULL::bigint, NULL::bigint, NULL::double precision,
           NULL::double precision, NULL::double precision
    FROM (SELECT t.seq, t.step, t.state, t.hash FROM log t ORDER BY t.seq DESC LIMIT 1) AS l
    WHERE l.seq = p_seq AND l.hash = p_hash;
    IF FOUND THEN
      RETURN;
    END IF;
  END IF;
  RETURN QUERY
  SELECT 'tail'::text, l.seq, NULL::bigint, l.step, l.state, l.hash, NULL::bytea,
         NULL::bigint, NULL::bigint, NULL::bigint, NULL::double precision,
         NULL::double precision, NULL::double precision
  FROM log l
  WHERE l.seq >= (SELECT (coalesce(max(t.seq), 1) - 1) / p_block * p_block + 1 FROM log t)
  ORDER BY l.seq LIMIT p_block;
  RETURN QUERY
  SELECT 'node'::text, g.level::bigint, m.idx, NULL::text, NULL::text, NULL::text, m.hash,
         NULL::bigint, NULL::bigint, NULL::bigint, NULL::double precision,
         NULL::double precision, NULL::double precision
  FROM (SELECT coalesce(max(t.seq), 0) AS n FROM log t) AS h
  CROSS JOIN generate_series(4, 60, 4) AS g(level)
  CROSS JOIN LATERAL (
    SELECT k.idx, k.hash FROM merkle_nodes k
    WHERE k.level = g.level AND k.idx >= ((h.n >> g.level) >> 4) << 4
      AND k.idx < (h.n >> g.level)
    OFFSET 0
  ) AS m
  WHERE (h.n >> g.level) > 0;
END;
$$;

-- Superseded revisions of a record, kept when an operator accepts a newcomer.
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

-- Conflicting newcomers: same identity, different content. One open row per distinct
-- newcomer; a repeat of it while open only counts, a resend after an operator closed
-- it opens another. resolved_by: the actor (an API token's name).
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
    resolved_by text,
    signature   text,
    key         text
);
CREATE INDEX quarantine_newcomer ON quarantine (inbox_id, ident, witness);
CREATE UNIQUE INDEX quarantine_one_open ON quarantine (inbox_id, ident, witness)
WHERE status = 'open';
CREATE INDEX quarantine_status ON quarantine (inbox_id, status);
CREATE INDEX quarantine_key ON quarantine (inbox_id, substr(key, 1, 256))
WHERE key <> identity;

-- Invalid deliveries: a bounded copy, its full length and digest, and the reason;
-- replayed_*: when it was delivered again, by whom, with which verdict; status: open,
-- replayed or archived (archived_*: by whom and why); attempts, last_reason, last_tried:
-- its deliveries again, and why the last was refused again.
CREATE TABLE dead_letters (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    inbox_id       bigint NOT NULL REFERENCES inboxes(id),
    reason         text NOT NULL,
    detail         text NOT NULL,
    head           bytea NOT NULL,
    length         bigint NOT NULL,
    sha256         text NOT NULL,
    key            text,
    received_at    double precision NOT NULL,
    device_time    text,
    snapshot_id    text,
    delivery_id    text,
    replayed_at    double precision,
    replayed_by    text,
    replay_verdict text,
    signature      text,
    status         text NOT NULL DEFAULT 'open',
    attempts       bigint NOT NULL DEFAULT 0,
    last_reason    text,
    last_tried     double precision,
    archived_at    double precision,
    archived_by    text,
    archive_note   text
);
CREATE INDEX dead_letters_inbox ON dead_letters (inbox_id, id);
CREATE INDEX dead_letters_reason ON dead_letters (inbox_id, reason, id);
CREATE INDEX dead_letters_key ON dead_letters (inbox_id, substr(key, 1, 256))
WHERE key IS NOT NULL;
CREATE INDEX dead_letters_status ON dead_letters (inbox_id, status, id);

-- Deliveries counted per inbox, hour and verdict.
CREATE TABLE verdict_counts (
    inbox_id bigint NOT NULL REFERENCES inboxes(id),
    hour     bigint NOT NULL,
    verdict  text NOT NULL,
    reason   text NOT NULL,
    n        bigint NOT NULL,
    PRIMARY KEY (inbox_id, hour, verdict, reason)
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

-- One strictly increasing counter per store: every lease gets the next token.
CREATE TABLE counters (
    name  text PRIMARY KEY,
    value bigint NOT NULL
);
INSERT INTO counters (name, value) VALUES ('lease_token', 0);

-- The append-only log: hash = SHA-256(prev | step | state), seq from 1 without gaps.
-- The log is the feed: an entry that seals a record's revision names it (its inbox,
-- record and revision); that entry's seq is the revision's feed position.
CREATE TABLE log (
    seq       bigint PRIMARY KEY,
    step      text NOT NULL,
    state     text NOT NULL,
    hash      text NOT NULL,
    inbox_id  bigint,
    record_id bigint,
    revision  bigint
);
-- The entries about a quarantined newcomer (its quarantine, its resolution) and about a
-- record after its seal (its eviction, a replay it came from), by the id their state
-- names (a state that is not the JSON oncebox writes names none: it is never refused).
-- Partial: an accept or a duplicate writes no entry here.
CREATE INDEX log_quarantine ON log (
    (substring(state FROM '"quarantine":([0-9]{1,18})[,}]')::bigint)
)
WHERE step IN ('quarantine', 'resolve');
CREATE INDEX log_record ON log (
    (substring(state FROM '"record":([0-9]{1,18})[,}]')::bigint)
)
WHERE step IN ('evict', 'replay');

-- Complete, aligned Merkle subtrees over the log, kept at levels 4, 8, 12, ... only
-- (engine/log.py rebuilds the others from these and from the entries).
CREATE TABLE merkle_nodes (
    level integer NOT NULL,
    idx   bigint NOT NULL,
    hash  bytea NOT NULL,
    PRIMARY KEY (level, idx)
);

-- Facts about the store itself; store_id names it in signed checkpoints.
CREATE TABLE meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);
INSERT INTO meta (key, value) VALUES ('store_id', md5(random()::text || clock_timestamp()::text));

-- Log events waiting for the sealer, which appends them in queue order.
CREATE TABLE log_pending (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    step      text NOT NULL,
    state     text NOT NULL,
    record_id bigint,           -- set for a record's seal
    revision  bigint,           -- the revision it seals
    inbox_id  bigint
);

-- The one fence: the current lease of each resource (kind, owner, name) that one
-- writer holds at a time, under the one token counter. A new lease replaces the row,
-- fencing every older token at once.
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
-- The log's one writer at a time: whoever appends to the log first holds this row (the
-- sealer's lease, locked alone), so it is there from the start.
INSERT INTO fences (kind, owner, name, token, holder, issued_at, expires_at, released_at)
VALUES ('sealer', 0, '', 0, NULL, 0, 0, NULL);

-- API tokens for the HTTP service. Only the SHA-256 of a token's secret is kept; the
-- secret itself is shown once. A name may be reused once its token is revoked, so
-- uniqueness covers live tokens only.
CREATE TABLE api_tokens (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text NOT NULL,
    secret_hash bytea NOT NULL UNIQUE,
    inboxes     text NOT NULL,   -- JSON array of inbox names, or ["*"]
    scopes      text NOT NULL,   -- JSON array of read | write | operator | admin
    hmac_key    text,            -- request-signing key, kept in the store when asked for
    created_at  double precision NOT NULL,
    revoked_at  double precision,
    expires_at  double precision,          -- NULL: never; refused from then on
    last_used_at double precision          -- written at most once a minute per token
);
CREATE UNIQUE INDEX api_tokens_live_name ON api_tokens (name) WHERE revoked_at IS NULL;

-- Signed requests already seen, shared by every process and host that serves this
-- store, so a captured request cannot be replayed through another server while its
-- timestamp is fresh. Rows are dropped once their window has passed.
CREATE TABLE seen_signatures (
    signature  text PRIMARY KEY,
    expires_at double precision NOT NULL
);
CREATE INDEX seen_signatures_expiry ON seen_signatures (expires_at);

-- Console sessions, kept on the server: the SHA-256 of the cookie's random id, the
-- token it belongs to and its expiry on the server clock.
CREATE TABLE console_sessions (
    id_hash    bytea PRIMARY KEY,
    token_id   bigint NOT NULL REFERENCES api_tokens(id),
    created_at double precision NOT NULL,
    expires_at double precision NOT NULL
);
CREATE INDEX console_sessions_token ON console_sessions (token_id);
CREATE INDEX console_sessions_expiry ON console_sessions (expires_at);

-- The tables an apply step owns, and which of its migrations this store has applied.
CREATE TABLE step_schema (
    step       text NOT NULL,
    version    integer NOT NULL,
    applied_at double precision NOT NULL,
    PRIMARY KEY (step, version)
);

-- A consumer: a named cursor over one inbox's feed, moved only under its lease (the
-- fence's kind 'consumer'). position: the last acknowledged; handed_out: the last given.
CREATE TABLE consumers (
    name       text PRIMARY KEY,
    inbox_id   bigint NOT NULL REFERENCES inboxes(id),
    position   bigint NOT NULL,
    handed_out bigint NOT NULL,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL
);

-- Forwarding: each accepted revision owed to each of its inbox's destinations, written
-- in the transaction that accepted it (the outbox), so a record and its pending
-- forwards commit together or not at all. A dispatcher's claim on one is a lease of the
-- one fence (kind 'forward', owner its inbox, named by its id), not a column here.
-- status: pending (no attempt yet), failed (retrying), delivered, dead (given up).
-- order_key: the record's identity under ordered = "key" (NULL otherwise).
CREATE TABLE forwards (
    id          bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    inbox_id    bigint NOT NULL,  -- its record's inbox, checked there (migration 023)
    destination text NOT NULL,
    record_id   bigint NOT NULL,
    revision    bigint NOT NULL,
    order_key   text,
    status      text NOT NULL DEFAULT 'pending'
                CHECK (status IN ('pending', 'failed', 'delivered', 'dead')),
    attempts    bigint NOT NULL DEFAULT 0,
    schedule_at bigint NOT NULL DEFAULT 0,  -- attempts when its schedule began
    next_at     double precision NOT NULL,
    created_at  double precision NOT NULL,
    updated_at  double precision NOT NULL,
    last_status bigint,
    last_error  text,
    finished_at double precision
);
-- What a dispatcher claims next: the unfinished, by when they are due.
CREATE INDEX forwards_due ON forwards (destination, next_at)
    WHERE status IN ('pending', 'failed');
-- Under ordered = "key", the head of each key: the oldest unfinished one.
CREATE INDEX forwards_heads ON forwards (destination, order_key, id)
    WHERE order_key IS NOT NULL AND status IN ('pending', 'failed');
-- Listings of the failing and the dead by destination (an operator's): the only ones
-- that need an index, and none is written as a forward is queued (migration 023).
CREATE INDEX forwards_failing ON forwards (destination, status, id)
    WHERE status IN ('failed', 'dead');
-- A record's forwards.
CREATE INDEX forwards_record ON forwards (record_id);

-- Every attempt at a forward, as it went: its answer's status and first 1 KiB, its
-- error, its latency, and when the next one is due. A stale one (its claim lost to
-- another dispatcher meanwhile) is kept too.
CREATE TABLE forward_attempts (
    id         bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    forward_id bigint NOT NULL,
    number     bigint NOT NULL,
    at         double precision NOT NULL,
    outcome    text NOT NULL,
    status     bigint,
    latency    double precision NOT NULL,
    answer     bytea,
    error      text,
    next_at    double precision,
    dispatcher text NOT NULL
);
CREATE INDEX forward_attempts_forward ON forward_attempts (forward_id, id);

-- A destination's state shared by every dispatcher: paused by an operator, and its
-- circuit breaker (closed, open until open_until, or half-open with one probe out).
CREATE TABLE forward_destinations (
    name       text PRIMARY KEY,
    inbox_id   bigint NOT NULL REFERENCES inboxes(id),
    paused_at  double precision,
    paused_by  text,
    circuit    text NOT NULL DEFAULT 'closed',
    failures   bigint NOT NULL DEFAULT 0,
    open_until double precision
);

-- Attempts counted per destination, hour and outcome (a success rate without a scan).
CREATE TABLE forward_counts (
    destination text NOT NULL,
    hour        bigint NOT NULL,
    outcome     text NOT NULL,
    n           bigint NOT NULL,
    PRIMARY KEY (destination, hour, outcome)
);
