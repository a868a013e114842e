-- The SQLite store's whole schema as it stands after every migration in this folder:
-- what a new store is made with, in one transaction, every migration then recorded as
-- applied. An existing store gets here through the migrations instead, and
-- tests/test_schema.py checks that both roads end in the same database. A change is a
-- new migration and the same change here.
--
-- The apply steps' tables (the triage ledger, the work keys) are not here: each step
-- makes its own, with its own migrations, once an inbox uses it.
--
-- Times are seconds since the epoch on the server clock. Digests (ident, witness) are
-- SHA-256, kept as 32 bytes.

-- An inbox: a named intake, its codec, apply step and retention. What a dropped
-- tombstone had counted stays on its inbox (dropped_*), so its counts never go down.
CREATE TABLE inboxes (
    id                   INTEGER PRIMARY KEY,
    name                 TEXT NOT NULL UNIQUE,
    codec                TEXT NOT NULL,
    apply                TEXT NOT NULL,
    retention_seconds    REAL,             -- NULL: kept forever
    tombstone_seconds    REAL,             -- NULL: tombstones kept forever
    fenced               INTEGER NOT NULL DEFAULT 0,
    dropped_duplicates   INTEGER NOT NULL DEFAULT 0,
    dropped_late_replays INTEGER NOT NULL DEFAULT 0,
    dropped_max_lateness REAL NOT NULL DEFAULT 0
);

-- One row per identity per inbox (I1), enforced by the unique key. An evicted record
-- stays as a tombstone: content, identity text and fields dropped, digests kept. Ids
-- are reserved by the writer (reserve_record_ids) and never reused: the highest one
-- retention ever dropped is kept in meta (record_ids_used).
CREATE TABLE records (
    id           INTEGER PRIMARY KEY,
    inbox_id     INTEGER NOT NULL REFERENCES inboxes(id),
    ident        BLOB NOT NULL,        -- SHA-256 of the identity
    identity     TEXT,                 -- the identity itself; NULL once evicted
    witness      BLOB NOT NULL,        -- SHA-256 of the canonical content
    revision     INTEGER NOT NULL DEFAULT 1,
    content      BLOB,
    fields       TEXT,
    first_seen   REAL NOT NULL,
    last_seen    REAL NOT NULL,
    seen_count   INTEGER NOT NULL DEFAULT 1,
    evicted_at   REAL,
    late_replays INTEGER NOT NULL DEFAULT 0,
    max_lateness REAL NOT NULL DEFAULT 0,
    device_time  TEXT,
    snapshot_id  TEXT,
    delivery_id  TEXT,
    log_seq      INTEGER,              -- the seal's log position; NULL until sealed
    revised_at   REAL,                 -- when the current revision was decided
    signature    TEXT,                 -- what a verified webhook signature vouched for
    key          TEXT,                 -- the delivery's key (NULL: none, or unknown)
    UNIQUE (inbox_id, ident)
);
CREATE INDEX records_age ON records (inbox_id, first_seen);
CREATE INDEX records_unsealed ON records (id) WHERE log_seq IS NULL;
-- A record's delivery key, where it is not the identity (whose own index finds it): an
-- accepted delivery keyed by its identity writes no entry here. The first 256 characters
-- of a key are indexed (a b-tree entry is bounded), the whole key compared on the row.
CREATE INDEX records_key ON records (inbox_id, substr(key, 1, 256)) WHERE key <> identity;

-- Every read of a record's log position goes through this view, as on PostgreSQL,
-- where a seal may keep the position in a row of its own; here the view is the table.
-- A migration that rebuilds records drops the view first and makes it again after.
CREATE VIEW records_read AS SELECT * FROM records;

-- Superseded revisions of a record, kept when an operator accepts a newcomer.
CREATE TABLE revisions (
    record_id     INTEGER NOT NULL REFERENCES records(id),
    revision      INTEGER NOT NULL,
    witness       BLOB NOT NULL,
    content       BLOB,
    fields        TEXT,
    decided_at    REAL NOT NULL,
    superseded_at REAL NOT NULL,
    note          TEXT,
    PRIMARY KEY (record_id, revision)
);

-- Conflicting newcomers: same identity, different content. One open row per distinct
-- newcomer; a repeat of it while open only counts, a resend after an operator closed
-- it opens another. resolved_by: the actor (an API token's name).
CREATE TABLE quarantine (
    id          INTEGER PRIMARY KEY,
    inbox_id    INTEGER NOT NULL REFERENCES inboxes(id),
    ident       BLOB NOT NULL,
    identity    TEXT NOT NULL,
    record_id   INTEGER,
    witness     BLOB NOT NULL,
    content     BLOB NOT NULL,
    fields      TEXT NOT NULL,
    reason      TEXT NOT NULL,
    status      TEXT NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'kept', 'accepted')),
    note        TEXT,
    first_seen  REAL NOT NULL,
    last_seen   REAL NOT NULL,
    seen_count  INTEGER NOT NULL DEFAULT 1,
    resolved_at REAL,
    device_time TEXT,
    snapshot_id TEXT,
    delivery_id TEXT,
    resolved_by TEXT,
    signature   TEXT,
    key         TEXT
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
    id             INTEGER PRIMARY KEY,
    inbox_id       INTEGER NOT NULL REFERENCES inboxes(id),
    reason         TEXT NOT NULL,
    detail         TEXT NOT NULL,
    head           BLOB NOT NULL,
    length         INTEGER NOT NULL,
    sha256         TEXT NOT NULL,
    key            TEXT,
    received_at    REAL NOT NULL,
    device_time    TEXT,
    snapshot_id    TEXT,
    delivery_id    TEXT,
    replayed_at    REAL,
    replayed_by    TEXT,
    replay_verdict TEXT,
    signature      TEXT,
    status         TEXT NOT NULL DEFAULT 'open',
    attempts       INTEGER NOT NULL DEFAULT 0,
    last_reason    TEXT,
    last_tried     REAL,
    archived_at    REAL,
    archived_by    TEXT,
    archive_note   TEXT
);
CREATE INDEX dead_letters_inbox ON dead_letters (inbox_id, id);
CREATE INDEX dead_letters_reason ON dead_letters (inbox_id, reason, id);
CREATE INDEX dead_letters_key ON dead_letters (inbox_id, substr(key, 1, 256))
WHERE key IS NOT NULL;
CREATE INDEX dead_letters_status ON dead_letters (inbox_id, status, id);

-- Deliveries counted per inbox, hour and verdict.
CREATE TABLE verdict_counts (
    inbox_id INTEGER NOT NULL REFERENCES inboxes(id),
    hour     INTEGER NOT NULL,
    verdict  TEXT NOT NULL,
    reason   TEXT NOT NULL,
    n        INTEGER NOT NULL,
    PRIMARY KEY (inbox_id, hour, verdict, reason)
) WITHOUT ROWID;

-- Retention history: every eviction and every override below the floor.
CREATE TABLE evictions (
    id         INTEGER PRIMARY KEY,
    inbox_id   INTEGER NOT NULL REFERENCES inboxes(id),
    kind       TEXT NOT NULL CHECK (kind IN ('record', 'tombstone')),
    ident      BLOB NOT NULL,
    witness    BLOB NOT NULL,
    first_seen REAL NOT NULL,
    evicted_at REAL NOT NULL
);

CREATE TABLE retention_overrides (
    id                INTEGER PRIMARY KEY,
    inbox_id          INTEGER NOT NULL REFERENCES inboxes(id),
    retention_seconds REAL NOT NULL,
    reason            TEXT NOT NULL,
    at                REAL NOT NULL
);

-- One strictly increasing counter per store: every lease gets the next token.
CREATE TABLE counters (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
INSERT INTO counters (name, value) VALUES ('lease_token', 0);

-- The append-only log: hash = SHA-256(prev | step | state), seq from 1 without gaps.
-- The log is the feed: an entry that seals a record's revision names it (its inbox,
-- record and revision); that entry's seq is the revision's feed position.
CREATE TABLE log (
    seq       INTEGER PRIMARY KEY,
    step      TEXT NOT NULL,
    state     TEXT NOT NULL,
    hash      TEXT NOT NULL,
    inbox_id  INTEGER,
    record_id INTEGER,
    revision  INTEGER
);
-- The entries about a quarantined newcomer (its quarantine, its resolution) and about a
-- record after its seal (its eviction, a replay it came from), by the id their state
-- names (a state that is not the JSON oncebox writes names none: it is never refused).
-- Partial: an accept or a duplicate writes no entry here.
CREATE INDEX log_quarantine ON log (
    CASE WHEN json_valid(state) THEN json_extract(state, '$.quarantine') END
)
WHERE step IN ('quarantine', 'resolve');
CREATE INDEX log_record ON log (
    CASE WHEN json_valid(state) THEN json_extract(state, '$.record') END
)
WHERE step IN ('evict', 'replay');

-- Complete, aligned Merkle subtrees over the log, kept at levels 4, 8, 12, ... only
-- (engine/log.py rebuilds the others from these and from the entries).
CREATE TABLE merkle_nodes (
    level INTEGER NOT NULL,
    idx   INTEGER NOT NULL,
    hash  BLOB NOT NULL,
    PRIMARY KEY (level, idx)
) WITHOUT ROWID;

-- Facts about the store itself; store_id names it in signed checkpoints.
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO meta (key, value) VALUES ('store_id', lower(hex(randomblob(16))));

-- Log events waiting for the sealer, which appends them in queue order.
CREATE TABLE log_pending (
    id        INTEGER PRIMARY KEY,
    step      TEXT NOT NULL,
    state     TEXT NOT NULL,
    record_id INTEGER,           -- set for a record's seal
    revision  INTEGER,           -- the revision it seals
    inbox_id  INTEGER
);
-- A forward waits for its revision's seal (forwards_due).
CREATE INDEX log_pending_revision ON log_pending (record_id, revision)
WHERE record_id IS NOT NULL;

-- The one fence: the current lease of each resource (kind, owner, name) that one
-- writer holds at a time, under the one token counter. A new lease replaces the row,
-- fencing every older token at once.
CREATE TABLE fences (
    kind        TEXT NOT NULL,     -- scope | sealer | work
    owner       INTEGER NOT NULL,  -- the inbox it belongs to (0: the store's own)
    name        TEXT NOT NULL,     -- the scope, the work key; "" for the sealer
    token       INTEGER NOT NULL,
    holder      TEXT,              -- a dedicated holder (a sealer, a worker), or none
    issued_at   REAL NOT NULL,
    expires_at  REAL NOT NULL,
    released_at REAL,
    PRIMARY KEY (kind, owner, name)
) WITHOUT ROWID;
-- The log's one writer at a time: whoever appends to the log first holds this row (the
-- sealer's lease, locked alone), so it is there from the start.
INSERT INTO fences (kind, owner, name, token, holder, issued_at, expires_at, released_at)
VALUES ('sealer', 0, '', 0, NULL, 0, 0, NULL);

-- API tokens for the HTTP service. Only the SHA-256 of a token's secret is kept; the
-- secret itself is shown once. A name may be reused once its token is revoked, so
-- uniqueness covers live tokens only.
CREATE TABLE api_tokens (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT NOT NULL,
    secret_hash BLOB NOT NULL UNIQUE,
    inboxes     TEXT NOT NULL,   -- JSON array of inbox names, or ["*"]
    scopes      TEXT NOT NULL,   -- JSON array of read | write | operator | admin
    hmac_key    TEXT,            -- request-signing key, kept in the store when asked for
    created_at  REAL NOT NULL,
    revoked_at  REAL,
    expires_at  REAL,          -- NULL: never; refused from then on
    last_used_at REAL          -- written at most once a minute per token
);
CREATE UNIQUE INDEX api_tokens_live_name ON api_tokens (name) WHERE revoked_at IS NULL;

-- Signed requests already seen, shared by every process that serves this store, so a
-- captured request cannot be replayed through another server while its timestamp is
-- fresh. Rows are dropped once their window has passed.
CREATE TABLE seen_signatures (
    signature  TEXT PRIMARY KEY,
    expires_at REAL NOT NULL
);
CREATE INDEX seen_signatures_expiry ON seen_signatures (expires_at);

-- Console sessions, kept on the server: the SHA-256 of the cookie's random id, the
-- token it belongs to and its expiry on the server clock.
CREATE TABLE console_sessions (
    id_hash    BLOB PRIMARY KEY,
    token_id   INTEGER NOT NULL REFERENCES api_tokens(id),
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL
);
CREATE INDEX console_sessions_token ON console_sessions (token_id);
CREATE INDEX console_sessions_expiry ON console_sessions (expires_at);

-- The tables an apply step owns, and which of its migrations this store has applied.
CREATE TABLE step_schema (
    step       TEXT NOT NULL,
    version    INTEGER NOT NULL,
    applied_at REAL NOT NULL,
    PRIMARY KEY (step, version)
) WITHOUT ROWID;

-- A consumer: a named cursor over one inbox's feed, moved only under its lease (the
-- fence's kind 'consumer'). position: the last acknowledged; handed_out: the last given.
CREATE TABLE consumers (
    name       TEXT PRIMARY KEY,
    inbox_id   INTEGER NOT NULL REFERENCES inboxes(id),
    position   INTEGER NOT NULL,
    handed_out INTEGER NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);

-- Forwarding: each accepted revision owed to each of its inbox's destinations, written
-- in the transaction that accepted it (the outbox), so a record and its pending
-- forwards commit together or not at all. A dispatcher's claim on one is a lease of the
-- one fence (kind 'forward', owner its inbox, named by its id), not a column here.
-- status: pending (no attempt yet), failed (retrying), delivered, dead (given up).
-- order_key: the record's identity under ordered = "key" (NULL otherwise).
CREATE TABLE forwards (
    id          INTEGER PRIMARY KEY,
    inbox_id    INTEGER NOT NULL REFERENCES inboxes(id),
    destination TEXT NOT NULL,
    record_id   INTEGER NOT NULL,
    revision    INTEGER NOT NULL,
    order_key   TEXT,
    status      TEXT NOT NULL DEFAULT 'pending'
                CHECK (status IN ('pending', 'failed', 'delivered', 'dead')),
    attempts    INTEGER NOT NULL DEFAULT 0,
    schedule_at INTEGER NOT NULL DEFAULT 0,  -- attempts when its schedule began
    next_at     REAL NOT NULL,
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL,
    last_status INTEGER,
    last_error  TEXT,
    finished_at REAL
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
    id         INTEGER PRIMARY KEY,
    forward_id INTEGER NOT NULL,
    number     INTEGER NOT NULL,
    at         REAL NOT NULL,
    outcome    TEXT NOT NULL,
    status     INTEGER,
    latency    REAL NOT NULL,
    answer     BLOB,
    error      TEXT,
    next_at    REAL,
    dispatcher TEXT NOT NULL
);
CREATE INDEX forward_attempts_forward ON forward_attempts (forward_id, id);

-- A destination's state shared by every dispatcher: paused by an operator, and its
-- circuit breaker (closed, open until open_until, or half-open with one probe out).
CREATE TABLE forward_destinations (
    name       TEXT PRIMARY KEY,
    inbox_id   INTEGER NOT NULL REFERENCES inboxes(id),
    paused_at  REAL,
    paused_by  TEXT,
    circuit    TEXT NOT NULL DEFAULT 'closed',
    failures   INTEGER NOT NULL DEFAULT 0,
    open_until REAL
);

-- Attempts counted per destination, hour and outcome (a success rate without a scan).
CREATE TABLE forward_counts (
    destination TEXT NOT NULL,
    hour        INTEGER NOT NULL,
    outcome     TEXT NOT NULL,
    n           INTEGER NOT NULL,
    PRIMARY KEY (destination, hour, outcome)
) WITHOUT ROWID;
