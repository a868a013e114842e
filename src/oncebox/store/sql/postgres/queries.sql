-- The PostgreSQL store's own statements, by name: what it runs differently from SQLite
-- (its clock, its locks, its JSON functions, its batches). Everything else is in
-- ../common/queries.sql. Loaded once by oncebox.store.sqlfile.
-- Positional %s parameters unless a block says otherwise. A block marked "-- columnar"
-- runs once for a whole batch: the store passes one array per column (the same rows the
-- SQLite store runs the statement for one by one), so a batch costs one statement; the
-- arrays travel in binary (%b), which spares escaping every element as text.

-- name: now
SELECT extract(epoch FROM clock_timestamp())::double precision;

-- name: lock_inbox_shared
-- Advisory lock space 3: an inbox's identities, shared by the batches deciding in it.
SELECT pg_advisory_xact_lock_shared(3, %s::int);

-- name: lock_inbox_shared_relaxed
-- lock_inbox_shared and defer_durability in one statement, for a decision begun relaxed
-- (set_config(..., true) is SET LOCAL).
SELECT pg_advisory_xact_lock_shared(3, %s::int), set_config('synchronous_commit', 'off', true);

-- name: lock_inbox
-- Advisory lock space 3, exclusive: a stored record of the inbox is being revised.
SELECT pg_advisory_xact_lock(3, %s::int);

-- name: find_records
-- A batch's identities in one statement (a JSON array of hex digests): only what a
-- decision needs, no content.
SELECT id, ident, witness, revision, evicted_at, first_seen, log_seq
FROM records_read
WHERE inbox_id = %s
  AND ident = ANY (ARRAY(SELECT decode(value, 'hex') FROM json_array_elements_text(%s::json)));

-- name: list_originals
-- The records these quarantine rows conflict with (same inbox and identity), each value
-- cut as list_quarantine cuts it; the first column names the quarantine row.
SELECT q.id AS quarantine_id, r.id, r.inbox_id, r.ident,
       left(r.identity, %(text)s::int) AS identity, r.witness, r.revision,
       substring(r.content FROM 1 FOR %(head)s::int) AS content,
       left(r.fields, %(fields)s::int) AS fields, r.first_seen, r.last_seen, r.seen_count,
       r.evicted_at, r.late_replays, left(r.device_time, %(text)s::int) AS device_time,
       left(r.snapshot_id, %(text)s::int) AS snapshot_id,
       left(r.delivery_id, %(text)s::int) AS delivery_id, r.signature, r.log_seq,
       r.revised_at, octet_length(r.content) AS content_length,
       left(r.key, %(text)s::int) AS key
FROM quarantine q JOIN records_read r ON r.inbox_id = q.inbox_id AND r.ident = q.ident
WHERE q.id IN (SELECT value::bigint FROM json_array_elements_text(%(ids)s::json));

-- name: insert_records
-- columnar; ids reserved by reserve_record_ids. No ON CONFLICT (its speculative
-- insertion writes a WAL record more a row): an identity a concurrent writer inserted
-- first fails the statement, and the store has the engine decide again
-- (PostgresTx.insert_records). A record whose seal is
-- queued (no log_seq given) is stored with log_seq = -1: its position will be in
-- seal_positions (migration 14, read through records_read). In identity order: two
-- batches that share identities wait on each other's uncommitted rows in one order, so
-- they queue instead of deadlocking (no identity locks are taken before).
-- The arrays are unnested in the select list, where each gives its next element as the
-- row is made: unnest(...) in FROM first copies every column's elements into a store of
-- their own (a tuplestore each), about 1 us of the server's a record. The rows are the
-- same: the arrays' elements side by side, as many rows as the arrays are long.
-- foldable: reads only its parameters and its own table (store/pgfold.py).
INSERT INTO records (id, inbox_id, ident, identity, witness, content, fields, first_seen,
                     last_seen, device_time, snapshot_id, delivery_id, signature,
                     log_seq, key)
OVERRIDING SYSTEM VALUE
SELECT id, inbox_id, ident, identity, witness, content, fields, first_seen, last_seen,
       device_time, snapshot_id, delivery_id, signature, coalesce(log_seq, -1), key
FROM (SELECT unnest(%b::bigint[]) AS id, unnest(%b::bigint[]) AS inbox_id,
             unnest(%b::bytea[]) AS ident, unnest(%b::text[]) AS identity,
             unnest(%b::bytea[]) AS witness, unnest(%b::bytea[]) AS content,
             unnest(%b::text[]) AS fields, unnest(%b::float8[]) AS first_seen,
             unnest(%b::float8[]) AS last_seen, unnest(%b::text[]) AS device_time,
             unnest(%b::text[]) AS snapshot_id, unnest(%b::text[]) AS delivery_id,
             unnest(%b::text[]) AS signature, unnest(%b::bigint[]) AS log_seq,
             unnest(%b::text[]) AS key) AS t
ORDER BY 3;

-- name: reserve_record_ids
-- The identity sequence never goes back, so an id is never handed out twice. Named
-- (records_id_seq, which migration 26 and the schema check), not looked up per id.
SELECT nextval('records_id_seq'::regclass) FROM generate_series(1, %s) ORDER BY 1;

-- name: decision_reads
-- The inbox's shared lock and decision_lookup's rows in one statement (the function
-- decision_reads_locked, migration 24), for an inbox that is not lease-fenced (a fenced
-- one holds its scopes' leases between the two). Parameters: inbox, idents (the
-- batch's identities; migration 26), relaxed (the relaxed beginning's SET LOCAL with
-- the lock).
SELECT * FROM decision_reads_locked(%s, %b::bytea[], %s);

-- name: decision_lookup
-- What a decision reads once its locks are held, in one statement (one snapshot): the
-- server clock (kind 'clock', in first_seen), the batch's stored records (kind 'stored',
-- as find_records gives them) and a fresh id for each identity (a JSON array of hex
-- digests) that no record holds (kind 'fresh', in id). Run after the locks, so the
-- clock is read once they are granted. The fresh ids are for the identities the lookup
-- did not find, so the records are read once, by their identity index: an anti-join
-- against records instead may be planned (as a generic plan is, with few rows counted)
-- as a hash of every record of the inbox, a cost that grows with the store; and each
-- identity is looked up on its own (a lateral subquery OFFSET 0 keeps apart), by the
-- whole index, where an = ANY of them was planned, on such statistics, as a read of
-- the inbox's every record filtered (migration 25). The identities not found are
-- those NOT IN the found ones, a hash of them (a hashed subplan; identities are never
-- NULL), not each compared with every found one (<> ALL of an array: a batch's square,
-- migration 28).
WITH wanted AS (
  SELECT DISTINCT decode(value, 'hex') AS ident FROM json_array_elements_text(%(idents)s::json)
), found AS (
  SELECT 'stored' AS kind, r.id, r.ident, r.witness, r.revision, r.evicted_at,
         r.first_seen, r.log_seq
  FROM wanted w CROSS JOIN LATERAL (
    SELECT * FROM records_read s WHERE s.inbox_id = %(inbox)s AND s.ident = w.ident OFFSET 0
  ) r
)
SELECT kind, id, ident, witness, revision, evicted_at, first_seen, log_seq FROM found
UNION ALL
SELECT 'fresh', nextval('records_id_seq'::regclass), NULL, NULL, NULL, NULL, NULL, NULL
FROM wanted w
WHERE w.ident NOT IN (SELECT ident FROM found)
UNION ALL
SELECT 'clock', NULL, NULL, NULL, NULL, NULL,
       extract(epoch FROM clock_timestamp())::double precision, NULL;

-- name: seal_reads_held
-- The log's lease, held, and seal_reads' rows in one statement (the function
-- seal_reads_held, migrations 24 and 26). Parameters: the connection's own
-- synchronous_commit to go back to (NULL: leave it), limit, block, and the position and
-- chain hash of the connection's last append (NULL: none known).
SELECT * FROM seal_reads_held(%s, %s, %s, %s::bigint, %s::text);

-- name: seal_reads_after
-- seal_reads_held in the statement of the writes held before it (store/pgfold.py folds
-- them in as WITH parts, their counts in counts): its first argument waits for their
-- sum, so the log is taken once every row those writes lock is locked, as when they
-- were statements of their own before it. Each row: the writes' counts, then the reads.
SELECT c.*, s.* FROM counts AS c
CROSS JOIN LATERAL seal_reads_held(CASE WHEN c.written >= 0 THEN %s::text END, %s, %s,
                                   %s::bigint, %s::text) AS s;

-- name: seal_reads
-- What a seal reads once the log is held (held_leases_exclusive, sent just before), in
-- one statement (one snapshot): the clock (kind 'clock'), the queue's next events (kind
-- 'pending', as pending_log), the log's head with the entries of its last Merkle block
-- of block entries (kind 'tail') and the kept Merkle nodes the appends may hash with
-- (kind 'node': level in a, index in b; at each kept level, every fourth, those of the
-- last group of 16 before the log's end). Named parameters: limit, block.
-- What seal_reads_held runs once it holds the lease, as one statement: kept here so
-- that tests/test_query_plans.py holds its plans on their indexes.
(SELECT 'clock' AS kind, NULL::bigint AS a, NULL::bigint AS b, NULL::text AS step,
        NULL::text AS state, NULL::text AS hash, NULL::bytea AS node, NULL::bigint AS record_id,
        NULL::bigint AS revision, NULL::bigint AS inbox_id,
        extract(epoch FROM clock_timestamp())::double precision AS clock)
UNION ALL
(SELECT 'pending', id, NULL, step, state, NULL, NULL, record_id, revision, inbox_id, NULL
 FROM log_pending ORDER BY id LIMIT %(limit)s)
UNION ALL
(SELECT 'tail', seq, NULL, step, state, hash, NULL, NULL, NULL, NULL, NULL FROM log
 WHERE seq >= (SELECT (coalesce(max(seq), 1) - 1) / %(block)s * %(block)s + 1 FROM log)
 ORDER BY seq LIMIT %(block)s)
UNION ALL
(SELECT 'node', l.level, m.idx, NULL, NULL, NULL, m.hash, NULL, NULL, NULL, NULL
 FROM (SELECT coalesce(max(seq), 0) AS n FROM log) AS h
 CROSS JOIN generate_series(4, 60, 4) AS l(level)
 CROSS JOIN LATERAL (
   SELECT k.idx, k.hash FROM merkle_nodes k
   WHERE k.level = l.level AND k.idx >= ((h.n >> l.level) >> 4) << 4
     AND k.idx < (h.n >> l.level)
   OFFSET 0
 ) AS m
 WHERE (h.n >> l.level) > 0);

-- name: count_duplicates
-- columnar; rows (record id, repeats, now), ids ascending so batches lock rows in one order.
-- Each array a scalar subquery: a plan then never knows how long it is, so the plan a
-- prepared statement makes once (generic) costs what a plan for the given arrays costs
-- and is kept, where a join planned for one known element (custom) was always cheaper
-- and the statement was planned again on every call (50 to 90 us of the server's).
-- foldable: reads only its parameters and its own table (store/pgfold.py).
UPDATE records SET seen_count = seen_count + t.n, last_seen = t.now
FROM unnest((SELECT %b::bigint[]), (SELECT %b::bigint[]), (SELECT %b::float8[])) AS t(id, n, now)
WHERE records.id = t.id;

-- name: count_late_replays
-- columnar; rows (record id, repeats, now, greatest lateness); arrays as count_duplicates'.
-- foldable: reads only its parameters and its own table (store/pgfold.py).
UPDATE records
SET late_replays = late_replays + t.n, last_seen = t.now,
    max_lateness = greatest(max_lateness, t.lateness)
FROM unnest((SELECT %b::bigint[]), (SELECT %b::bigint[]), (SELECT %b::float8[]),
            (SELECT %b::float8[])) AS t(id, n, now, lateness)
WHERE records.id = t.id;

-- name: get_quarantine_for_update
SELECT id, inbox_id, ident, identity, record_id, witness, content, fields, reason, status,
       note, first_seen, last_seen, seen_count, resolved_at, device_time, snapshot_id,
       delivery_id, signature, resolved_by, octet_length(content) AS content_length, key
FROM quarantine WHERE id = %s FOR UPDATE;

-- name: list_dead_letters
-- Named parameters, every filter optional (NULL: any); after: the last id of the page
-- before (paging by id). Values cut as list_quarantine cuts them (the search looks at
-- the whole kept head).
SELECT id, inbox_id, reason, left(detail, %(text)s::int) AS detail,
       substring(head FROM 1 FOR %(head)s::int) AS head, length, sha256,
       left(key, %(text)s::int) AS key, received_at,
       left(device_time, %(text)s::int) AS device_time,
       left(snapshot_id, %(text)s::int) AS snapshot_id,
       left(delivery_id, %(text)s::int) AS delivery_id, signature, replayed_at, replayed_by,
       replay_verdict, octet_length(head) AS kept, status, attempts,
       left(last_reason, %(text)s::int) AS last_reason, last_tried, archived_at,
       left(archived_by, %(text)s::int) AS archived_by,
       left(archive_note, %(text)s::int) AS archive_note
FROM dead_letters
WHERE (%(inbox)s::bigint IS NULL OR inbox_id = %(inbox)s)
  AND (%(reason)s::text IS NULL OR reason = %(reason)s)
  AND (%(status)s::text IS NULL OR status = %(status)s)
  AND (%(since)s::float8 IS NULL OR received_at >= %(since)s)
  AND (%(until)s::float8 IS NULL OR received_at < %(until)s)
  AND (%(search)s::bytea IS NULL OR position(%(search)s::bytea IN head) > 0)
  AND id > %(after)s
ORDER BY id LIMIT %(limit)s;

-- name: list_dead_letters_newest
-- list_dead_letters newest first: before is the last id of the page before.
SELECT id, inbox_id, reason, left(detail, %(text)s::int) AS detail,
       substring(head FROM 1 FOR %(head)s::int) AS head, length, sha256,
       left(key, %(text)s::int) AS key, received_at,
       left(device_time, %(text)s::int) AS device_time,
       left(snapshot_id, %(text)s::int) AS snapshot_id,
       left(delivery_id, %(text)s::int) AS delivery_id, signature, replayed_at, replayed_by,
       replay_verdict, octet_length(head) AS kept, status, attempts,
       left(last_reason, %(text)s::int) AS last_reason, last_tried, archived_at,
       left(archived_by, %(text)s::int) AS archived_by,
       left(archive_note, %(text)s::int) AS archive_note
FROM dead_letters
WHERE (%(inbox)s::bigint IS NULL OR inbox_id = %(inbox)s)
  AND (%(reason)s::text IS NULL OR reason = %(reason)s)
  AND (%(status)s::text IS NULL OR status = %(status)s)
  AND (%(since)s::float8 IS NULL OR received_at >= %(since)s)
  AND (%(until)s::float8 IS NULL OR received_at < %(until)s)
  AND (%(search)s::bytea IS NULL OR position(%(search)s::bytea IN head) > 0)
  AND id < %(before)s
ORDER BY id DESC LIMIT %(limit)s;

-- name: get_dead_letter
SELECT id, inbox_id, reason, detail, head, length, sha256, key, received_at, device_time,
       snapshot_id, delivery_id, signature, replayed_at, replayed_by, replay_verdict,
       octet_length(head) AS kept, status, attempts, last_reason, last_tried, archived_at,
       archived_by, archive_note
FROM dead_letters WHERE id = %s FOR UPDATE;

-- name: count_dead_letters
-- How many list_dead_letters would give without a limit or a page (a bulk action's
-- preview), up to %(most)s.
SELECT count(*) FROM (
  SELECT 1 FROM dead_letters
  WHERE (%(inbox)s::bigint IS NULL OR inbox_id = %(inbox)s)
    AND (%(reason)s::text IS NULL OR reason = %(reason)s)
    AND (%(status)s::text IS NULL OR status = %(status)s)
    AND (%(since)s::float8 IS NULL OR received_at >= %(since)s)
    AND (%(until)s::float8 IS NULL OR received_at < %(until)s)
    AND (%(search)s::bytea IS NULL OR position(%(search)s::bytea IN head) > 0)
    AND id > %(after)s
  LIMIT %(most)s
) AS matching;

-- name: evict_records
-- Named parameters: inbox, cutoff, now, limit.
WITH doomed AS (
  SELECT id FROM records
  WHERE inbox_id = %(inbox)s AND evicted_at IS NULL AND first_seen < %(cutoff)s
  ORDER BY first_seen LIMIT %(limit)s
  FOR UPDATE
)
UPDATE records
SET evicted_at = %(now)s, content = NULL, fields = NULL, identity = NULL,
    key = NULL
FROM doomed WHERE records.id = doomed.id
RETURNING records.id AS record_id, records.ident, records.witness, records.first_seen;

-- name: drop_tombstones
-- Named parameters: inbox, cutoff, limit. Their seal positions go with them.
WITH dropped AS (
  DELETE FROM records
  WHERE id IN (
    SELECT id FROM records
    WHERE inbox_id = %(inbox)s AND evicted_at IS NOT NULL AND first_seen < %(cutoff)s
    ORDER BY first_seen LIMIT %(limit)s
    FOR UPDATE
  )
  RETURNING id AS record_id, ident, witness, first_seen, seen_count - 1 AS duplicates,
            late_replays, max_lateness
), positions AS (
  DELETE FROM seal_positions WHERE record_id IN (SELECT record_id FROM dropped)
)
SELECT record_id, ident, witness, first_seen, duplicates, late_replays, max_lateness
FROM dropped;

-- name: held_leases
-- FOR SHARE: a delivery deciding under one of these leases keeps it from being replaced
-- until the decision commits, so a new lease can never slip in between the check and
-- the insert; deciders share them. In name order, so that batches lock them in one order.
SELECT kind, owner, name, token, holder, issued_at, expires_at, released_at
FROM fences
WHERE kind = %s AND owner = %s AND name = ANY (ARRAY(SELECT json_array_elements_text(%s::json)))
ORDER BY name
FOR SHARE;

-- name: held_leases_exclusive
-- FOR UPDATE: the holder of a resource only one may write at a time (the log's sealer,
-- a work key) waits for any other until it commits.
SELECT kind, owner, name, token, holder, issued_at, expires_at, released_at
FROM fences
WHERE kind = %s AND owner = %s AND name = ANY (ARRAY(SELECT json_array_elements_text(%s::json)))
ORDER BY name
FOR UPDATE;

-- name: insist_durability
-- This transaction's commit waits for its WAL flush after all (it began relaxed, then
-- took the log outside a pipeline): synchronous_commit back to the connection's own.
SELECT set_config('synchronous_commit', %s, true);

-- name: append_log
-- columnar. An entry that seals a record's revision names it (inbox, record, revision):
-- its seq is that revision's feed position. Unnested in the select list, as
-- insert_records' arrays are (no tuplestore a column).
INSERT INTO log (seq, step, state, hash, inbox_id, record_id, revision)
SELECT unnest(%b::bigint[]), unnest(%b::text[]), unnest(%b::text[]), unnest(%b::text[]),
       unnest(%b::bigint[]), unnest(%b::bigint[]), unnest(%b::bigint[]);

-- name: put_merkle_node
-- columnar
INSERT INTO merkle_nodes (level, idx, hash)
SELECT * FROM unnest(%b::int[], %b::bigint[], %b::bytea[]);

-- name: mark_sealed
-- columnar; rows (seq, record id). A record that has no log_seq yet (NULL) gets it set;
-- any other gets a seal_positions row (records_read finds it there for log_seq = -1),
-- a narrow insert instead of a rewrite of the whole record. The first seal stays: an
-- earlier seal's, else the lowest of this one's (a record's accept and the resolve that
-- revised it can be sealed together), as on SQLite; not whichever row the sort by id
-- or the join met first, which PostgreSQL does not fix.
WITH s AS (
  SELECT id, min(seq) AS seq FROM unnest(%b::bigint[], %b::bigint[]) AS u(seq, id)
  GROUP BY id
), legacy AS (
  UPDATE records SET log_seq = s.seq FROM s
  WHERE records.id = s.id AND records.log_seq IS NULL
  RETURNING records.id
)
INSERT INTO seal_positions (record_id, seq)
SELECT id, seq FROM s WHERE id NOT IN (SELECT id FROM legacy) ORDER BY id
ON CONFLICT (record_id) DO NOTHING;

-- name: seal_writes
-- A seal's writes in one statement: append_log, put_merkle_node, mark_sealed and
-- drop_pending as they are apart (each part's arrays may be empty; a batch's long ones
-- unnested in the select list, as append_log's). Nothing in it reads
-- what another part writes; the log is held (the sealer's lease, FOR UPDATE).
WITH appended AS (
  INSERT INTO log (seq, step, state, hash, inbox_id, record_id, revision)
  SELECT unnest(%b::bigint[]), unnest(%b::text[]), unnest(%b::text[]), unnest(%b::text[]),
         unnest(%b::bigint[]), unnest(%b::bigint[]), unnest(%b::bigint[])
), nodes AS (
  INSERT INTO merkle_nodes (level, idx, hash)
  SELECT * FROM unnest(%b::int[], %b::bigint[], %b::bytea[])
), s AS (  -- each record's lowest seq, as mark_sealed takes it
  SELECT id, min(seq) AS seq FROM unnest(%b::bigint[], %b::bigint[]) AS u(seq, id)
  GROUP BY id
), legacy AS (
  UPDATE records SET log_seq = s.seq FROM s
  WHERE records.id = s.id AND records.log_seq IS NULL
  RETURNING records.id
), positions AS (
  INSERT INTO seal_positions (record_id, seq)
  SELECT id, seq FROM s WHERE id NOT IN (SELECT id FROM legacy) ORDER BY id
  ON CONFLICT (record_id) DO NOTHING
)
DELETE FROM log_pending WHERE id = ANY (%b::bigint[]);

-- name: count_verdicts
-- columnar; rows (inbox, hour, verdict, reason, n), one per (verdict, reason), sorted so
-- that concurrent batches lock the counter rows in one order (count_verdict, a batch
-- at once); an upsert: one row each.
-- foldable: reads only its parameters and its own table (store/pgfold.py).
INSERT INTO verdict_counts (inbox_id, hour, verdict, reason, n)
SELECT inbox_id, hour, verdict, reason, n
FROM unnest(%b::bigint[], %b::bigint[], %b::text[], %b::text[], %b::bigint[])
     WITH ORDINALITY AS c(inbox_id, hour, verdict, reason, n, ord)
ORDER BY ord
ON CONFLICT (inbox_id, hour, verdict, reason) DO UPDATE
SET n = verdict_counts.n + excluded.n;

-- name: queue_logs
-- columnar; queue order is seal order, so the rows keep theirs.
-- foldable: reads only its parameters and its own table (store/pgfold.py).
INSERT INTO log_pending (step, state, record_id, revision, inbox_id)
SELECT step, state, record_id, revision, inbox_id
FROM unnest(%b::text[], %b::text[], %b::bigint[], %b::bigint[], %b::bigint[])
     WITH ORDINALITY AS e(step, state, record_id, revision, inbox_id, ord)
ORDER BY ord;

-- name: drop_pending
-- columnar
DELETE FROM log_pending WHERE id = ANY (%b::bigint[]);

-- name: defer_durability
-- This transaction's commit returns without waiting for its WAL flush: either the
-- durable commit its caller makes next flushes the WAL up to a later point, covering
-- it, or it wrote nothing but counts, which a server crash may take back.
SET LOCAL synchronous_commit TO OFF;

-- name: schema_version_columns
-- None: a new store. No renumbered_from: migrations numbered as before both backends
-- shared one numbering (oncebox.store.migrate).
SELECT column_name FROM information_schema.columns
WHERE table_schema = current_schema() AND table_name = 'schema_version';

-- name: inboxes_columns
-- Some: the schema_version beside it is an oncebox store's (every store has had its
-- inboxes since migration 1), not another application's table of that name.
SELECT column_name FROM information_schema.columns
WHERE table_schema = current_schema() AND table_name = 'inboxes';

-- name: create_schema_version
CREATE TABLE schema_version (
    version         integer PRIMARY KEY,
    applied_at      double precision NOT NULL,
    renumbered_from integer
);

-- name: lock_migrations
-- One migrator at a time, whichever process opened the store.
SELECT pg_advisory_xact_lock(%s);

-- Feed -------------------------------------------------------------------------------

-- name: feed_entries
-- Named parameters: inbox, after, until, limit, head. The inbox's sealed revisions in the
-- window (after, until], in position order: each revision's own values, the record's or a
-- superseded one's from revisions, its content cut to head bytes with its length read
-- whole. A record dropped by retention is gone.
SELECT l.seq AS position, l.record_id, l.revision, r.identity,
       CASE WHEN l.revision = r.revision THEN r.witness ELSE v.witness END AS witness,
       CASE WHEN l.revision = r.revision THEN r.fields ELSE v.fields END AS fields,
       substring(CASE WHEN l.revision = r.revision THEN r.content ELSE v.content END
                 FROM 1 FOR %(head)s::int) AS content,
       octet_length(CASE WHEN l.revision = r.revision THEN r.content ELSE v.content END)
         AS content_length,
       r.first_seen,
       CASE WHEN l.revision = 1 THEN r.first_seen
            WHEN l.revision = r.revision THEN r.revised_at ELSE v.decided_at END AS decided_at,
       r.device_time, r.snapshot_id, r.delivery_id, r.signature
FROM log l JOIN records r ON r.id = l.record_id
LEFT JOIN revisions v ON v.record_id = l.record_id AND v.revision = l.revision
WHERE l.seq > %(after)s AND l.seq <= %(until)s AND l.inbox_id = %(inbox)s
ORDER BY l.seq LIMIT %(limit)s;

-- name: consumer_get
SELECT name, inbox_id, position, handed_out, created_at, updated_at
FROM consumers WHERE name = %s FOR UPDATE;

-- Finding records (oncebox.store.finding) -------------------------------------------

-- name: record_page_oldest
-- Named parameters. On records_age (first_seen): the window's range, in its order, from
-- where the page before ended.
SELECT id FROM records
WHERE inbox_id = %(inbox)s AND first_seen >= %(low)s AND first_seen <= %(high)s
  AND (first_seen > %(at)s OR id > %(id)s)
  AND (%(search)s::bytea IS NULL OR position(%(search)s::bytea IN content) > 0)
ORDER BY first_seen, id LIMIT %(limit)s;

-- name: record_page_newest
SELECT id FROM records
WHERE inbox_id = %(inbox)s AND first_seen >= %(low)s AND first_seen <= %(high)s
  AND (first_seen < %(at)s OR id < %(id)s)
  AND (%(search)s::bytea IS NULL OR position(%(search)s::bytea IN content) > 0)
ORDER BY first_seen DESC, id DESC LIMIT %(limit)s;

-- name: records_listed
-- Named parameters. Each value cut as list_originals cuts it; the search looks at the
-- whole content.
SELECT id, inbox_id, ident, left(identity, %(text)s::int) AS identity, witness, revision,
       substring(content FROM 1 FOR %(head)s::int) AS content,
       left(fields, %(fields)s::int) AS fields, first_seen, last_seen, seen_count,
       evicted_at, late_replays, left(device_time, %(text)s::int) AS device_time,
       left(snapshot_id, %(text)s::int) AS snapshot_id,
       left(delivery_id, %(text)s::int) AS delivery_id, signature, log_seq, revised_at,
       octet_length(content) AS content_length, left(key, %(text)s::int) AS key
FROM records_read
WHERE id = ANY (ARRAY(SELECT value::bigint FROM json_array_elements_text(%(ids)s::json)))
  AND (%(search)s::bytea IS NULL OR position(%(search)s::bytea IN content) > 0);

-- name: log_about
-- Named parameters. By the ids the entries' states name, on the partial indexes
-- log_quarantine and log_record (their expressions written here exactly as there).
SELECT seq, step, state, hash, inbox_id, record_id, revision FROM log
WHERE step IN ('quarantine', 'resolve')
  AND (substring(state FROM '"quarantine":([0-9]{1,18})[,}]')::bigint) = ANY (
      ARRAY(SELECT value::bigint FROM json_array_elements_text(%(quarantine)s::json)))
UNION
SELECT seq, step, state, hash, inbox_id, record_id, revision FROM log
WHERE step IN ('evict', 'replay')
  AND (substring(state FROM '"record":([0-9]{1,18})[,}]')::bigint) = ANY (
      ARRAY(SELECT value::bigint FROM json_array_elements_text(%(records)s::json)))
ORDER BY seq LIMIT %(limit)s;

-- name: forward_get_for_update
-- A forward read to be written back (an attempt settled, an operator's retry): held until
-- the commit, so neither writes over what the other committed after its read.
SELECT id, inbox_id, destination, record_id, revision, order_key, status, attempts,
       schedule_at, next_at, created_at, updated_at, last_status, last_error, finished_at
FROM forwards WHERE id = %s FOR UPDATE;

-- name: forwards_queue
-- columnar; one row per revision and destination, in the deciding transaction.
INSERT INTO forwards (inbox_id, destination, record_id, revision, order_key, next_at,
                      created_at, updated_at)
SELECT * FROM unnest(%b::bigint[], %b::text[], %b::bigint[], %b::bigint[], %b::text[],
                     %b::float8[], %b::float8[], %b::float8[]);

-- name: forwards_due
-- What may be claimed of a destination now: its inbox's (a name moved to another inbox
-- is not sent the first one's), unfinished, due, and under no live lease
-- (a prefilter: the fence's take decides, engine/fence.py). Under :ordered, only the
-- head of each key (its oldest unfinished forward of the inbox), so a failing head holds
-- its key only.
-- SKIP LOCKED: a row another dispatcher is claiming right now is left to it. Only a
-- sealed revision (its seal no longer in log_pending): a batch's decision commits without
-- its flush, and only its seal's durable commit makes it durable; sent before, a crash
-- could take back what the destination was given (engine/durability.py).
SELECT o.id, o.inbox_id, o.destination, o.record_id, o.revision, o.order_key, o.status,
       o.attempts, o.schedule_at, o.next_at, o.created_at, o.updated_at, o.last_status,
       o.last_error, o.finished_at
FROM forwards o
LEFT JOIN fences f ON f.kind = 'forward' AND f.owner = o.inbox_id
                   AND f.name = o.id::text
WHERE o.destination = %(destination)s AND o.inbox_id = %(inbox)s
  AND o.status IN ('pending', 'failed') AND o.next_at <= %(now)s
  AND (f.name IS NULL OR f.released_at IS NOT NULL OR f.expires_at < %(now)s)
  AND NOT EXISTS (
        SELECT 1 FROM log_pending q
        WHERE q.record_id = o.record_id AND q.revision = o.revision)
  AND (NOT %(ordered)s OR NOT EXISTS (
        SELECT 1 FROM forwards p
        WHERE p.destination = o.destination AND p.order_key = o.order_key
          AND p.order_key IS NOT NULL AND p.status IN ('pending', 'failed') AND p.id < o.id
          AND p.inbox_id = o.inbox_id))
ORDER BY o.next_at, o.id LIMIT %(limit)s
FOR UPDATE OF o SKIP LOCKED;

-- name: step_guard_table
-- Held by a transaction while SQL of a user's own runs in it: a row whose deferred
-- foreign key is broken until the store's own commit mends it (step_guard_lift), so a
-- COMMIT the user's SQL sends fails and rolls everything back instead of committing half
-- a transaction. The connection's own table (temporary), made once per session.
CREATE TEMP TABLE IF NOT EXISTS oncebox_step_guard (
  id int PRIMARY KEY,
  parent int REFERENCES oncebox_step_guard (id) DEFERRABLE INITIALLY DEFERRED
);

-- name: step_guard_set
INSERT INTO pg_temp.oncebox_step_guard VALUES (1, 0);

-- name: step_guard_lift
-- One row lifted; none: a ROLLBACK AND CHAIN of the user's own threw the work before it
-- away (and the guard with it).
DELETE FROM pg_temp.oncebox_step_guard;
