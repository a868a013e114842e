-- The SQLite store's own statements, by name: what it runs differently from PostgreSQL.
-- Everything else is in ../common/queries.sql. Loaded once by oncebox.store.sqlfile.
-- BEGIN IMMEDIATE takes the database's one write lock for every write transaction, so
-- nothing here locks rows.

-- name: find_records
-- A batch's identities in one statement, bound as one array of their digests (the
-- carray extension, apsw.carray: no JSON array of hex digests to write and parse, no
-- recursive CTE cutting a blob apart), each looked up by the unique index: only what a
-- decision needs, no content.
SELECT r.id, r.ident, r.witness, r.revision, r.evicted_at, r.first_seen, r.log_seq
FROM carray(?2) AS c CROSS JOIN records_read AS r ON r.inbox_id = ?1 AND r.ident = c.value;

-- name: find_record
-- find_records for a batch of one (a single ingest), by the identity itself: no JSON
-- array to write and read back.
SELECT id, ident, witness, revision, evicted_at, first_seen, log_seq
FROM records_read WHERE inbox_id = ? AND ident = ?;

-- name: find_record_or_next_id
-- find_record, or where there is no such record the id reserve_record_id would give, in
-- one statement: under LIMIT 1 the second part runs only when the first found nothing.
-- (A record's ident is never NULL: a row without one is the id.)
SELECT id, ident, witness, revision, evicted_at, first_seen, log_seq
FROM records_read WHERE inbox_id = ? AND ident = ?
UNION ALL
SELECT max(coalesce((SELECT max(id) FROM records), 0),
           coalesce((SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'record_ids_used'), 0))
       + 1, NULL, NULL, NULL, NULL, NULL, NULL
LIMIT 1;

-- name: list_originals
-- The records these quarantine rows conflict with (same inbox and identity), each value
-- cut as list_quarantine cuts it; the first column names the quarantine row.
SELECT q.id AS quarantine_id, r.id, r.inbox_id, r.ident,
       substr(r.identity, 1, :text) AS identity, r.witness, r.revision,
       CASE WHEN length(r.content) <= :head THEN r.content
            ELSE substr(r.content, 1, :head) END AS content,
       substr(r.fields, 1, :fields) AS fields, r.first_seen, r.last_seen, r.seen_count,
       r.evicted_at, r.late_replays, substr(r.device_time, 1, :text) AS device_time,
       substr(r.snapshot_id, 1, :text) AS snapshot_id,
       substr(r.delivery_id, 1, :text) AS delivery_id, r.signature, r.log_seq, r.revised_at,
       length(r.content) AS content_length, substr(r.key, 1, :text) AS key
FROM quarantine q JOIN records_read r ON r.inbox_id = q.inbox_id AND r.ident = q.ident
WHERE q.id IN (SELECT value FROM json_each(:ids));

-- name: insert_records
-- Run once per row, ids reserved by reserve_record_ids. DO NOTHING: one a concurrent
-- writer inserted first is not counted, and the engine decides again.
INSERT INTO records (id, inbox_id, ident, identity, witness, content, fields, first_seen,
                     last_seen, device_time, snapshot_id, delivery_id, signature,
                     log_seq, key)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (inbox_id, ident) DO NOTHING;

-- name: reserve_record_ids
-- The next ids after every record there is or was (retention remembers the highest it
-- dropped), one row each; the write lock BEGIN IMMEDIATE holds keeps them ours. The
-- general statement: SQLiteTx reads the first (reserve_record_id) and counts on.
WITH RECURSIVE used(top) AS (
  SELECT max(coalesce((SELECT max(id) FROM records), 0),
             coalesce((SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'record_ids_used'), 0))
), n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < CAST(? AS INTEGER))
SELECT top + i FROM used, n ORDER BY i;

-- name: reserve_record_id
-- The first id reserve_record_ids gives (the others follow it), without the recursive
-- count and its ORDER BY, whose temporary tables cost it several times more.
SELECT max(coalesce((SELECT max(id) FROM records), 0),
           coalesce((SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'record_ids_used'), 0))
       + 1;

-- name: remember_dropped_id
INSERT INTO meta (key, value) VALUES ('record_ids_used', CAST(? AS TEXT))
ON CONFLICT (key) DO UPDATE
SET value = CAST(max(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER)) AS TEXT);

-- name: count_duplicates
-- Run once per (record id, repeats, now).
UPDATE records SET seen_count = seen_count + ?2, last_seen = ?3 WHERE id = ?1;

-- name: count_duplicates_at_once
-- count_duplicates of every record that repeated the same number of times (?2), their
-- ids bound as one array (carray, apsw.carray of 64-bit integers): one statement for a
-- batch's duplicates, not one a record. Each id is searched by the primary key.
UPDATE records SET seen_count = seen_count + ?2, last_seen = ?3 WHERE id IN carray(?1);

-- name: count_late_replays
-- Run once per (record id, repeats, now, greatest lateness).
UPDATE records
SET late_replays = late_replays + ?2, last_seen = ?3, max_lateness = max(max_lateness, ?4)
WHERE id = ?1;

-- name: get_quarantine_for_update
-- BEGIN IMMEDIATE already holds the database's one write lock.
SELECT id, inbox_id, ident, identity, record_id, witness, content, fields, reason, status,
       note, first_seen, last_seen, seen_count, resolved_at, device_time, snapshot_id,
       delivery_id, signature, resolved_by, length(content) AS content_length, key
FROM quarantine WHERE id = ?;

-- name: list_dead_letters
-- Every filter optional (NULL: any); after: the last id of the page before (paging by id).
-- Values cut as list_quarantine cuts them (the search looks at the whole kept head).
SELECT id, inbox_id, reason, substr(detail, 1, :text) AS detail,
       CASE WHEN length(head) <= :head THEN head
            ELSE substr(head, 1, :head) END AS head,
       length, sha256, substr(key, 1, :text) AS key,
       received_at, substr(device_time, 1, :text) AS device_time,
       substr(snapshot_id, 1, :text) AS snapshot_id,
       substr(delivery_id, 1, :text) AS delivery_id, signature, replayed_at, replayed_by,
       replay_verdict, length(head) AS kept, status, attempts,
       substr(last_reason, 1, :text) AS last_reason, last_tried, archived_at,
       substr(archived_by, 1, :text) AS archived_by,
       substr(archive_note, 1, :text) AS archive_note
FROM dead_letters
WHERE (:inbox IS NULL OR inbox_id = :inbox) AND (:reason IS NULL OR reason = :reason)
  AND (:status IS NULL OR status = :status)
  AND (:since IS NULL OR received_at >= :since) AND (:until IS NULL OR received_at < :until)
  AND (:search IS NULL OR instr(head, CAST(:search AS BLOB)) > 0)
  AND id > :after
ORDER BY id LIMIT :limit;

-- name: list_dead_letters_newest
-- list_dead_letters newest first: before is the last id of the page before.
SELECT id, inbox_id, reason, substr(detail, 1, :text) AS detail,
       CASE WHEN length(head) <= :head THEN head
            ELSE substr(head, 1, :head) END AS head,
       length, sha256, substr(key, 1, :text) AS key,
       received_at, substr(device_time, 1, :text) AS device_time,
       substr(snapshot_id, 1, :text) AS snapshot_id,
       substr(delivery_id, 1, :text) AS delivery_id, signature, replayed_at, replayed_by,
       replay_verdict, length(head) AS kept, status, attempts,
       substr(last_reason, 1, :text) AS last_reason, last_tried, archived_at,
       substr(archived_by, 1, :text) AS archived_by,
       substr(archive_note, 1, :text) AS archive_note
FROM dead_letters
WHERE (:inbox IS NULL OR inbox_id = :inbox) AND (:reason IS NULL OR reason = :reason)
  AND (:status IS NULL OR status = :status)
  AND (:since IS NULL OR received_at >= :since) AND (:until IS NULL OR received_at < :until)
  AND (:search IS NULL OR instr(head, CAST(:search AS BLOB)) > 0)
  AND id < :before
ORDER BY id DESC LIMIT :limit;

-- name: get_dead_letter
SELECT id, inbox_id, reason, detail, head, length, sha256, key, received_at, device_time,
       snapshot_id, delivery_id, signature, replayed_at, replayed_by, replay_verdict,
       length(head) AS kept, status, attempts, last_reason, last_tried, archived_at,
       archived_by, archive_note
FROM dead_letters WHERE id = ?;

-- name: count_dead_letters
-- How many list_dead_letters would give without a limit or a page (a bulk action's
-- preview), up to :most.
SELECT count(*) FROM (
  SELECT 1 FROM dead_letters
  WHERE (:inbox IS NULL OR inbox_id = :inbox) AND (:reason IS NULL OR reason = :reason)
    AND (:status IS NULL OR status = :status)
    AND (:since IS NULL OR received_at >= :since) AND (:until IS NULL OR received_at < :until)
    AND (:search IS NULL OR instr(head, CAST(:search AS BLOB)) > 0)
    AND id > :after
  LIMIT :most
);

-- name: evict_records
-- Turn the oldest records into tombstones: identity digest, witness and times stay.
WITH doomed AS (
  SELECT id FROM records
  WHERE inbox_id = :inbox AND evicted_at IS NULL AND first_seen < :cutoff
  ORDER BY first_seen LIMIT :limit
)
UPDATE records
SET evicted_at = :now, content = NULL, fields = NULL, identity = NULL, key = NULL
WHERE id IN (SELECT id FROM doomed)
RETURNING id AS record_id, ident, witness, first_seen;

-- name: drop_tombstones
DELETE FROM records
WHERE id IN (
  SELECT id FROM records
  WHERE inbox_id = :inbox AND evicted_at IS NOT NULL AND first_seen < :cutoff
  ORDER BY first_seen LIMIT :limit
)
RETURNING id AS record_id, ident, witness, first_seen, seen_count - 1 AS duplicates,
          late_replays, max_lateness;

-- name: held_leases
-- BEGIN IMMEDIATE already holds the database's one write lock: nothing more to hold.
SELECT kind, owner, name, token, holder, issued_at, expires_at, released_at
FROM fences WHERE kind = ? AND owner = ? AND name IN (SELECT value FROM json_each(?));

-- name: held_lease
-- held_leases for one name (the sealer's, a single delivery's scope), on the primary
-- key: no JSON array to read back into a temporary table.
SELECT kind, owner, name, token, holder, issued_at, expires_at, released_at
FROM fences WHERE kind = ? AND owner = ? AND name = ?;

-- name: seal_reads
-- What appending reads first, in one row (BEGIN IMMEDIATE already holds the log): the
-- sealer's lease, whether any event is queued, where the log ends (its last seq and
-- hash). No row without the sealer's (a store makes it at once). Subqueries, not joins:
-- SQLite ran this read as joins at several times the cost of the three statements.
SELECT kind, owner, name, token, holder, issued_at, expires_at, released_at,
       EXISTS (SELECT 1 FROM log_pending),
       (SELECT seq FROM log ORDER BY seq DESC LIMIT 1),
       (SELECT hash FROM log ORDER BY seq DESC LIMIT 1)
FROM fences WHERE kind = ? AND owner = ? AND name = ?;

-- name: held_leases_exclusive
-- The same: SQLite has one writer at a time whatever is read.
SELECT kind, owner, name, token, holder, issued_at, expires_at, released_at
FROM fences WHERE kind = ? AND owner = ? AND name IN (SELECT value FROM json_each(?));

-- name: append_log
-- An entry that seals a record's revision names it (inbox, record, revision): its seq is
-- that revision's feed position.
INSERT INTO log (seq, step, state, hash, inbox_id, record_id, revision)
VALUES (?, ?, ?, ?, ?, ?, ?);

-- name: put_merkle_node
INSERT INTO merkle_nodes (level, idx, hash) VALUES (?, ?, ?);

-- name: mark_sealed
UPDATE records SET log_seq = ? WHERE id = ? AND log_seq IS NULL;

-- name: queue_logs
INSERT INTO log_pending (step, state, record_id, revision, inbox_id) VALUES (?, ?, ?, ?, ?);

-- name: drop_pending
DELETE FROM log_pending WHERE id = ?;

-- name: schema_version_columns
-- None: a new store. No renumbered_from: migrations numbered as before both backends
-- shared one numbering (oncebox.store.migrate).
SELECT name FROM pragma_table_info('schema_version');

-- name: inboxes_columns
-- Some: the schema_version beside it is an oncebox store's (every store has had its
-- inboxes since migration 1), not another application's table of that name.
SELECT name FROM pragma_table_info('inboxes');

-- name: create_schema_version
CREATE TABLE schema_version (
    version         INTEGER PRIMARY KEY,
    applied_at      REAL NOT NULL,
    renumbered_from INTEGER
);

-- Feed -------------------------------------------------------------------------------

-- name: feed_entries
-- The inbox's sealed revisions in the window (:after, :until], in position order: each
-- revision's own values, the record's or a superseded one's from revisions, its content
-- cut to :head bytes with its length read whole. A record dropped by retention is gone.
SELECT l.seq AS position, l.record_id, l.revision, r.identity,
       CASE WHEN l.revision = r.revision THEN r.witness ELSE v.witness END AS witness,
       CASE WHEN l.revision = r.revision THEN r.fields ELSE v.fields END AS fields,
       CASE WHEN length(CASE WHEN l.revision = r.revision THEN r.content ELSE v.content END)
                 <= :head
            THEN CASE WHEN l.revision = r.revision THEN r.content ELSE v.content END
            ELSE substr(CASE WHEN l.revision = r.revision THEN r.content ELSE v.content END,
                        1, :head) END AS content,
       length(CASE WHEN l.revision = r.revision THEN r.content ELSE v.content END)
         AS content_length,
       r.first_seen,
       CASE WHEN l.revision = 1 THEN r.first_seen
            WHEN l.revision = r.revision THEN r.revised_at ELSE v.decided_at END AS decided_at,
       r.device_time, r.snapshot_id, r.delivery_id, r.signature
FROM log l JOIN records r ON r.id = l.record_id
LEFT JOIN revisions v ON v.record_id = l.record_id AND v.revision = l.revision
WHERE l.seq > :after AND l.seq <= :until AND l.inbox_id = :inbox
ORDER BY l.seq LIMIT :limit;

-- name: consumer_get
-- BEGIN IMMEDIATE already holds the database's one write lock: nothing more to lock.
SELECT name, inbox_id, position, handed_out, created_at, updated_at
FROM consumers WHERE name = ?;

-- Finding records (oncebox.store.finding) -------------------------------------------

-- name: record_page_oldest
-- On records_age (inbox_id, first_seen, and the rowid every SQLite index ends with):
-- the window's range, in its order, from where the page before ended.
SELECT id FROM records
WHERE inbox_id = :inbox AND first_seen >= :low AND first_seen <= :high
  AND (first_seen > :at OR id > :id)
  AND (:search IS NULL OR instr(content, CAST(:search AS BLOB)) > 0)
ORDER BY first_seen, id LIMIT :limit;

-- name: record_page_newest
SELECT id FROM records
WHERE inbox_id = :inbox AND first_seen >= :low AND first_seen <= :high
  AND (first_seen < :at OR id < :id)
  AND (:search IS NULL OR instr(content, CAST(:search AS BLOB)) > 0)
ORDER BY first_seen DESC, id DESC LIMIT :limit;

-- name: records_listed
-- Each value cut as list_originals cuts it; the search looks at the whole content.
SELECT id, inbox_id, ident, substr(identity, 1, :text) AS identity, witness, revision,
       CASE WHEN length(content) <= :head THEN content
            ELSE substr(content, 1, :head) END AS content,
       substr(fields, 1, :fields) AS fields, first_seen, last_seen, seen_count, evicted_at,
       late_replays, substr(device_time, 1, :text) AS device_time,
       substr(snapshot_id, 1, :text) AS snapshot_id,
       substr(delivery_id, 1, :text) AS delivery_id, signature, log_seq, revised_at,
       length(content) AS content_length, substr(key, 1, :text) AS key
FROM records_read
WHERE id IN (SELECT value FROM json_each(:ids))
  AND (:search IS NULL OR instr(content, CAST(:search AS BLOB)) > 0);

-- name: log_about
-- By the ids the entries' states name, on the partial indexes log_quarantine and
-- log_record (their expressions written here exactly as there).
SELECT seq, step, state, hash, inbox_id, record_id, revision FROM log
WHERE step IN ('quarantine', 'resolve')
  AND CASE WHEN json_valid(state) THEN json_extract(state, '$.quarantine') END
      IN (SELECT value FROM json_each(:quarantine))
UNION
SELECT seq, step, state, hash, inbox_id, record_id, revision FROM log
WHERE step IN ('evict', 'replay')
  AND CASE WHEN json_valid(state) THEN json_extract(state, '$.record') END
      IN (SELECT value FROM json_each(:records))
ORDER BY seq LIMIT :limit;

-- name: forward_get_for_update
-- BEGIN IMMEDIATE already holds the database's one write lock.
SELECT id, inbox_id, destination, record_id, revision, order_key, status, attempts,
       schedule_at, next_at, created_at, updated_at, last_status, last_error, finished_at
FROM forwards WHERE id = ?;

-- name: forwards_queue
-- One row per revision and destination, in the deciding transaction.
INSERT INTO forwards (inbox_id, destination, record_id, revision, order_key, next_at,
                      created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?);

-- name: forwards_due
-- What may be claimed of a destination now: its inbox's (a name moved to another inbox
-- is not sent the first one's), unfinished, due, sealed (what is handed on is in the
-- log: with sealing deferred, a revision waits for its seal), and under no live lease
-- (a prefilter: the fence's take decides, engine/fence.py). Under :ordered, only the
-- head of each key (its oldest unfinished forward of the inbox), so a failing head holds
-- its key only.
SELECT o.id, o.inbox_id, o.destination, o.record_id, o.revision, o.order_key, o.status,
       o.attempts, o.schedule_at, o.next_at, o.created_at, o.updated_at, o.last_status,
       o.last_error, o.finished_at
FROM forwards o
LEFT JOIN fences f ON f.kind = 'forward' AND f.owner = o.inbox_id
                   AND f.name = CAST(o.id AS TEXT)
WHERE o.destination = :destination AND o.inbox_id = :inbox
  AND o.status IN ('pending', 'failed') AND o.next_at <= :now
  AND (f.name IS NULL OR f.released_at IS NOT NULL OR f.expires_at < :now)
  AND NOT EXISTS (
        SELECT 1 FROM log_pending q
        WHERE q.record_id = o.record_id AND q.revision = o.revision)
  AND (NOT :ordered OR NOT EXISTS (
        SELECT 1 FROM forwards p
        WHERE p.destination = o.destination AND p.order_key = o.order_key
          AND p.order_key IS NOT NULL AND p.status IN ('pending', 'failed') AND p.id < o.id
          AND p.inbox_id = o.inbox_id))
ORDER BY o.next_at, o.id LIMIT :limit;
