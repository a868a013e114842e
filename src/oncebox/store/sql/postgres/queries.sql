-- Every statement the PostgreSQL store runs, by name. Loaded once by oncebox.store.sqlfile.
-- Positional %s parameters unless a block says otherwise. A block marked "-- columnar"
-- runs once for a whole batch: the store passes one array per column (the same rows the
-- SQLite store runs the statement for one by one), so a batch costs one statement; the
-- arrays travel in binary (%b), which spares escaping every element as text.

-- name: now
SELECT extract(epoch FROM clock_timestamp())::double precision;

-- name: lock_inbox_shared
-- Advisory lock space 3: an inbox's identities, shared by the batches deciding in it.
SELECT pg_advisory_xact_lock_shared(3, %s::int);

-- name: lock_inbox
-- Advisory lock space 3, exclusive: a stored record of the inbox is being revised.
SELECT pg_advisory_xact_lock(3, %s::int);

-- name: find_records
-- A batch's identities in one statement (a JSON array of hex digests): only what a
-- decision needs, no content. log_seq: see seal_positions (migration 10).
SELECT r.id, r.ident, r.witness, r.revision, r.evicted_at, r.first_seen,
       CASE WHEN r.log_seq = -1 THEN sp.seq ELSE r.log_seq END AS log_seq
FROM records r LEFT JOIN seal_positions sp ON r.log_seq = -1 AND sp.record_id = r.id
WHERE r.inbox_id = %s
  AND r.ident = ANY (ARRAY(SELECT decode(value, 'hex') FROM json_array_elements_text(%s::json)));

-- name: get_record
SELECT r.id, r.inbox_id, r.ident, r.identity, r.witness, r.revision, r.content, r.fields,
       r.first_seen, r.last_seen, r.seen_count, r.evicted_at, r.late_replays, r.device_time,
       r.snapshot_id, r.delivery_id, r.signature,
       CASE WHEN r.log_seq = -1 THEN sp.seq ELSE r.log_seq END AS log_seq, r.revised_at,
       octet_length(r.content) AS content_length
FROM records r LEFT JOIN seal_positions sp ON r.log_seq = -1 AND sp.record_id = r.id
WHERE r.id = %s;

-- name: list_originals
-- The records these quarantine rows conflict with (same inbox and identity), each value
-- cut as list_quarantine cuts it; the first column names the quarantine row.
SELECT q.id AS quarantine_id, r.id, r.inbox_id, r.ident,
       left(r.identity, %(text)s::int) AS identity, r.witness, r.revision,
       substring(r.content FROM 1 FOR %(head)s::int) AS content,
       left(r.fields, %(fields)s::int) AS fields, r.first_seen, r.last_seen, r.seen_count,
       r.evicted_at, r.late_replays, left(r.device_time, %(text)s::int) AS device_time,
       left(r.snapshot_id, %(text)s::int) AS snapshot_id,
       left(r.delivery_id, %(text)s::int) AS delivery_id, r.signature,
       CASE WHEN r.log_seq = -1 THEN sp.seq ELSE r.log_seq END AS log_seq, r.revised_at,
       octet_length(r.content) AS content_length
FROM quarantine q JOIN records r ON r.inbox_id = q.inbox_id AND r.ident = q.ident
LEFT JOIN seal_positions sp ON r.log_seq = -1 AND sp.record_id = r.id
WHERE q.id IN (SELECT value::bigint FROM json_array_elements_text(%(ids)s::json));

-- name: insert_records
-- columnar; ids reserved by reserve_record_ids. No ON CONFLICT (its speculative
-- insertion writes a WAL record more a row): an identity a concurrent writer inserted
-- first fails the statement, and the store has the engine decide again
-- (PostgresTx.insert_records). A record whose seal is
-- queued (no log_seq given) is stored with log_seq = -1: its position will be in
-- seal_positions (migration 10). In identity order: two
-- batches that share identities wait on each other's uncommitted rows in one order, so
-- they queue instead of deadlocking (no identity locks are taken before).
INSERT INTO records (id, inbox_id, ident, identity, witness, content, fields, first_seen,
                     last_seen, device_time, snapshot_id, delivery_id, signature,
                     log_seq)
OVERRIDING SYSTEM VALUE
SELECT id, inbox_id, ident, identity, witness, content, fields, first_seen, last_seen,
       device_time, snapshot_id, delivery_id, signature, coalesce(log_seq, -1)
FROM unnest(%b::bigint[], %b::bigint[], %b::bytea[], %b::text[], %b::bytea[],
                     %b::bytea[], %b::text[], %b::float8[], %b::float8[], %b::text[],
                     %b::text[], %b::text[], %b::text[], %b::bigint[])
                     AS t(id, inbox_id, ident, identity, witness, content, fields,
                          first_seen, last_seen, device_time, snapshot_id, delivery_id,
                          signature, log_seq)
ORDER BY 3;

-- name: reserve_record_ids
-- The identity sequence never goes back, so an id is never handed out twice.
SELECT nextval(pg_get_serial_sequence('records', 'id')) FROM generate_series(1, %s) ORDER BY 1;

-- name: count_duplicates
-- columnar; rows (record id, repeats, now), ids ascending so batches lock rows in one order.
UPDATE records SET seen_count = seen_count + t.n, last_seen = t.now
FROM unnest(%b::bigint[], %b::bigint[], %b::float8[]) AS t(id, n, now)
WHERE records.id = t.id;

-- name: count_late_replays
-- columnar; rows (record id, repeats, now, greatest lateness).
UPDATE records
SET late_replays = late_replays + t.n, last_seen = t.now,
    max_lateness = greatest(max_lateness, t.lateness)
FROM unnest(%b::bigint[], %b::bigint[], %b::float8[], %b::float8[]) AS t(id, n, now, lateness)
WHERE records.id = t.id;

-- name: keep_revision
INSERT INTO revisions (record_id, revision, witness, content, fields, decided_at,
                       superseded_at, note)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s);

-- name: revise_record
UPDATE records
SET witness = %s, content = %s, fields = %s, revision = revision + 1, last_seen = %s,
    revised_at = %s
WHERE id = %s
RETURNING revision;

-- name: revisions
SELECT record_id, revision, witness, content, fields, decided_at, superseded_at, note
FROM revisions WHERE record_id = %s ORDER BY revision;

-- name: quarantine_insert
INSERT INTO quarantine (inbox_id, ident, identity, record_id, witness, content, fields,
                        reason, first_seen, last_seen, seen_count, device_time, snapshot_id,
                        delivery_id, signature)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT ON CONSTRAINT quarantine_one_per_newcomer DO NOTHING
RETURNING id;

-- name: quarantine_repeat
UPDATE quarantine SET seen_count = seen_count + %s, last_seen = %s
WHERE inbox_id = %s AND ident = %s AND witness = %s
RETURNING id;

-- name: get_quarantine
SELECT id, inbox_id, ident, identity, record_id, witness, content, fields, reason, status,
       note, first_seen, last_seen, seen_count, resolved_at, device_time, snapshot_id,
       delivery_id, signature, resolved_by, octet_length(content) AS content_length
FROM quarantine WHERE id = %s;

-- name: get_quarantine_for_update
SELECT id, inbox_id, ident, identity, record_id, witness, content, fields, reason, status,
       note, first_seen, last_seen, seen_count, resolved_at, device_time, snapshot_id,
       delivery_id, signature, resolved_by, octet_length(content) AS content_length
FROM quarantine WHERE id = %s FOR UPDATE;

-- name: close_quarantine
UPDATE quarantine SET status = %s, note = %s, resolved_at = %s, resolved_by = %s
WHERE id = %s AND status = 'open';

-- name: list_quarantine
-- Named parameters: inbox, status, after (a page after this id), limit. Every value a
-- sender chose is read cut (head bytes of the content, text characters of each text,
-- fields of the fields' JSON), so that a listing never reads a whole large row; the
-- content's length is read whole.
SELECT id, inbox_id, ident, left(identity, %(text)s::int) AS identity, record_id, witness,
       substring(content FROM 1 FOR %(head)s::int) AS content,
       left(fields, %(fields)s::int) AS fields, reason, status,
       left(note, %(text)s::int) AS note,
       first_seen, last_seen, seen_count, resolved_at,
       left(device_time, %(text)s::int) AS device_time,
       left(snapshot_id, %(text)s::int) AS snapshot_id,
       left(delivery_id, %(text)s::int) AS delivery_id, signature, resolved_by,
       octet_length(content) AS content_length
FROM quarantine
WHERE (%(inbox)s::bigint IS NULL OR inbox_id = %(inbox)s)
  AND (%(status)s::text IS NULL OR status = %(status)s)
  AND id > %(after)s
ORDER BY id LIMIT %(limit)s;

-- name: dead_letter
INSERT INTO dead_letters (inbox_id, reason, detail, head, length, sha256, key, received_at,
                          device_time, snapshot_id, delivery_id, signature)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
RETURNING id;

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
       replay_verdict, octet_length(head) AS kept
FROM dead_letters
WHERE (%(inbox)s::bigint IS NULL OR inbox_id = %(inbox)s)
  AND (%(reason)s::text IS NULL OR reason = %(reason)s)
  AND (%(since)s::float8 IS NULL OR received_at >= %(since)s)
  AND (%(until)s::float8 IS NULL OR received_at < %(until)s)
  AND (%(search)s::bytea IS NULL OR position(%(search)s::bytea IN head) > 0)
  AND id > %(after)s
ORDER BY id LIMIT %(limit)s;

-- name: get_dead_letter
SELECT id, inbox_id, reason, detail, head, length, sha256, key, received_at, device_time,
       snapshot_id, delivery_id, signature, replayed_at, replayed_by, replay_verdict,
       octet_length(head) AS kept
FROM dead_letters WHERE id = %s FOR UPDATE;

-- name: mark_replayed
UPDATE dead_letters SET replayed_at = %s, replayed_by = %s, replay_verdict = %s WHERE id = %s;

-- name: count_verdict
INSERT INTO verdict_counts (inbox_id, hour, verdict, reason, n) VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (inbox_id, hour, verdict, reason) DO UPDATE
SET n = verdict_counts.n + excluded.n;

-- name: verdict_counts
SELECT verdict, reason, sum(n) FROM verdict_counts WHERE inbox_id = %s
GROUP BY verdict, reason;

-- name: verdict_hours
SELECT hour, verdict, sum(n) FROM verdict_counts WHERE inbox_id = %s AND hour >= %s
GROUP BY hour, verdict ORDER BY hour, verdict;

-- name: inbox_figures
-- Named parameter: inbox.
SELECT
  (SELECT count(*) FROM records WHERE inbox_id = %(inbox)s AND evicted_at IS NULL),
  (SELECT count(*) FROM records WHERE inbox_id = %(inbox)s AND evicted_at IS NOT NULL),
  (SELECT coalesce(sum(seen_count - 1), 0) FROM records WHERE inbox_id = %(inbox)s)
    + (SELECT dropped_duplicates FROM inboxes WHERE id = %(inbox)s),
  (SELECT coalesce(sum(late_replays), 0) FROM records WHERE inbox_id = %(inbox)s)
    + (SELECT dropped_late_replays FROM inboxes WHERE id = %(inbox)s),
  greatest((SELECT coalesce(max(max_lateness), 0) FROM records WHERE inbox_id = %(inbox)s),
           (SELECT dropped_max_lateness FROM inboxes WHERE id = %(inbox)s)),
  (SELECT count(*) FROM quarantine WHERE inbox_id = %(inbox)s AND status = 'open'),
  (SELECT count(*) FROM quarantine WHERE inbox_id = %(inbox)s),
  (SELECT count(*) FROM dead_letters WHERE inbox_id = %(inbox)s),
  (SELECT count(*) FROM evictions WHERE inbox_id = %(inbox)s);

-- name: evict_records
-- Named parameters: inbox, cutoff, now, limit.
WITH doomed AS (
  SELECT id FROM records
  WHERE inbox_id = %(inbox)s AND evicted_at IS NULL AND first_seen < %(cutoff)s
  ORDER BY first_seen LIMIT %(limit)s
  FOR UPDATE
)
UPDATE records SET evicted_at = %(now)s, content = NULL, fields = NULL, identity = NULL
FROM doomed WHERE records.id = doomed.id
RETURNING records.id AS record_id, records.ident, records.witness, records.first_seen;

-- name: evict_revisions
DELETE FROM revisions WHERE record_id IN (
  SELECT id FROM records WHERE inbox_id = %s AND evicted_at IS NOT NULL
);

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

-- name: carry_dropped_counts
-- What the dropped tombstones had counted stays on their inbox: counts never go down.
UPDATE inboxes
SET dropped_duplicates = dropped_duplicates + %(duplicates)s,
    dropped_late_replays = dropped_late_replays + %(late_replays)s,
    dropped_max_lateness = greatest(dropped_max_lateness, %(max_lateness)s)
WHERE id = %(inbox)s;

-- name: log_eviction
INSERT INTO evictions (inbox_id, kind, ident, witness, first_seen, evicted_at)
VALUES (%s, %s, %s, %s, %s, %s);

-- name: evictions
-- Named parameters: inbox, limit.
SELECT id, inbox_id, kind, ident, witness, first_seen, evicted_at FROM evictions
WHERE (%(inbox)s::bigint IS NULL OR inbox_id = %(inbox)s) ORDER BY id LIMIT %(limit)s;

-- name: record_retention_override
INSERT INTO retention_overrides (inbox_id, retention_seconds, reason, at)
VALUES (%s, %s, %s, %s);

-- name: retention_overrides
SELECT retention_seconds, reason, at FROM retention_overrides WHERE inbox_id = %s ORDER BY id;

-- name: declare_inbox
INSERT INTO inboxes (name, codec, apply, retention_seconds, tombstone_seconds, fenced)
VALUES (%s, %s, %s, %s, %s, %s)
ON CONFLICT (name) DO UPDATE
SET apply = excluded.apply, retention_seconds = excluded.retention_seconds,
    tombstone_seconds = excluded.tombstone_seconds, fenced = excluded.fenced;

-- name: get_inbox
SELECT id, name, codec, apply, retention_seconds, tombstone_seconds, fenced
FROM inboxes WHERE name = %s;

-- name: inboxes
SELECT id, name, codec, apply, retention_seconds, tombstone_seconds, fenced
FROM inboxes ORDER BY name;

-- name: next_token
UPDATE counters SET value = value + 1 WHERE name = 'lease_token' RETURNING value;

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

-- name: put_lease
INSERT INTO fences (kind, owner, name, token, holder, issued_at, expires_at, released_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (kind, owner, name) DO UPDATE
SET token = excluded.token, holder = excluded.holder, issued_at = excluded.issued_at,
    expires_at = excluded.expires_at, released_at = excluded.released_at;

-- name: list_leases
SELECT kind, owner, name, token, holder, issued_at, expires_at, released_at
FROM fences WHERE kind = %s AND owner = %s ORDER BY name;

-- name: log_head
SELECT seq, step, state, hash FROM log ORDER BY seq DESC LIMIT 1;

-- name: append_log
-- columnar. An entry that seals a record's revision names it (inbox, record, revision):
-- its seq is that revision's feed position.
INSERT INTO log (seq, step, state, hash, inbox_id, record_id, revision)
SELECT * FROM unnest(%b::bigint[], %b::text[], %b::text[], %b::text[], %b::bigint[],
                     %b::bigint[], %b::bigint[]);

-- name: log_entries
SELECT seq, step, state, hash FROM log WHERE seq >= %s AND seq < %s ORDER BY seq;

-- name: merkle_nodes
SELECT hash FROM merkle_nodes WHERE level = %s AND idx >= %s AND idx < %s ORDER BY idx;

-- name: put_merkle_node
-- columnar
INSERT INTO merkle_nodes (level, idx, hash)
SELECT * FROM unnest(%b::int[], %b::bigint[], %b::bytea[]);

-- name: unsealed_records
-- Records with a NULL log_seq and no queued seal (left by an older version). One with
-- log_seq = -1 always has a queued seal or a position (see seal_positions), so it is
-- not looked for here.
SELECT id, inbox_id, ident, identity, witness, revision, content, fields, first_seen,
       last_seen, seen_count, evicted_at, late_replays, device_time, snapshot_id, delivery_id,
       signature, log_seq, revised_at
FROM records
WHERE log_seq IS NULL
  AND id NOT IN (SELECT record_id FROM log_pending WHERE record_id IS NOT NULL)
ORDER BY id LIMIT %s;

-- name: mark_sealed
-- columnar; rows (seq, record id). A record that has no log_seq yet (NULL) gets it set;
-- any other gets a seal_positions row (one whose log_seq is -1 reads it from there),
-- a narrow insert instead of a rewrite of the whole record. The first seal stays.
WITH s AS (
  SELECT * FROM unnest(%b::bigint[], %b::bigint[]) AS s(seq, id)
), legacy AS (
  UPDATE records SET log_seq = s.seq FROM s
  WHERE records.id = s.id AND records.log_seq IS NULL
  RETURNING records.id
)
INSERT INTO seal_positions (record_id, seq)
SELECT id, seq FROM s WHERE id NOT IN (SELECT id FROM legacy) ORDER BY id
ON CONFLICT (record_id) DO NOTHING;

-- name: record_seals
SELECT r.id, CASE WHEN r.log_seq = -1 THEN sp.seq ELSE r.log_seq END
FROM records r LEFT JOIN seal_positions sp ON r.log_seq = -1 AND sp.record_id = r.id
ORDER BY r.id;

-- name: meta
SELECT value FROM meta WHERE key = %s;

-- name: queue_logs
-- columnar; queue order is seal order, so the rows keep theirs.
INSERT INTO log_pending (step, state, record_id, revision, inbox_id)
SELECT step, state, record_id, revision, inbox_id
FROM unnest(%b::text[], %b::text[], %b::bigint[], %b::bigint[], %b::bigint[])
     WITH ORDINALITY AS e(step, state, record_id, revision, inbox_id, ord)
ORDER BY ord;

-- name: pending_log
-- Only the sealer reads the queue, under the sealer row's lock; SKIP LOCKED is not
-- needed, and queue order must not have holes skipped.
SELECT id, step, state, record_id, revision, inbox_id FROM log_pending ORDER BY id LIMIT %s;

-- name: drop_pending
-- columnar
DELETE FROM log_pending WHERE id = ANY (%b::bigint[]);

-- name: log_pending_count
SELECT count(*) FROM log_pending;

-- name: last_pending_id
SELECT coalesce(max(id), 0) FROM log_pending;

-- name: defer_durability
-- This transaction's commit returns without waiting for its WAL flush; the durable
-- commit its caller makes next flushes the WAL up to a later point, covering it.
SET LOCAL synchronous_commit TO OFF;

-- name: probe_write
-- /readyz: a trivial write, so a full disk or a read-only store shows as not ready.
INSERT INTO meta (key, value) VALUES ('ready_probe', %s)
ON CONFLICT (key) DO UPDATE SET value = excluded.value;

-- name: insert_token
-- DO NOTHING on the live-name index: a name already in use returns no row.
INSERT INTO api_tokens (name, secret_hash, inboxes, scopes, hmac_key, created_at)
VALUES (%s, %s, %s, %s, %s, %s)
ON CONFLICT DO NOTHING
RETURNING id;

-- name: token_by_hash
SELECT id, name, secret_hash, inboxes, scopes, hmac_key, created_at, revoked_at
FROM api_tokens WHERE secret_hash = %s;

-- name: list_tokens
SELECT id, name, secret_hash, inboxes, scopes, hmac_key, created_at, revoked_at
FROM api_tokens ORDER BY id;

-- name: revoke_token
-- The ids of the tokens revoked (none: no live token by that name or id).
UPDATE api_tokens SET revoked_at = %s
WHERE revoked_at IS NULL AND (name = %s OR CAST(id AS text) = %s)
RETURNING id;

-- name: forget_signatures
DELETE FROM seen_signatures WHERE expires_at <= %s;

-- name: claim_signature
-- A row back: first use (or the old use's window has passed). None: a replay.
INSERT INTO seen_signatures (signature, expires_at) VALUES (%s, %s)
ON CONFLICT (signature) DO UPDATE SET expires_at = excluded.expires_at
WHERE seen_signatures.expires_at <= %s
RETURNING signature;

-- name: insert_session
INSERT INTO console_sessions (id_hash, token_id, created_at, expires_at)
VALUES (%s, %s, %s, %s);

-- name: session_token
-- A session that has not expired, with its token, only while the token is live.
SELECT t.id, t.name, t.secret_hash, t.inboxes, t.scopes, t.hmac_key, t.created_at,
       t.revoked_at, s.expires_at
FROM console_sessions s JOIN api_tokens t ON t.id = s.token_id
WHERE s.id_hash = %s AND s.expires_at > %s AND t.revoked_at IS NULL;

-- name: end_session
DELETE FROM console_sessions WHERE id_hash = %s;

-- name: end_token_sessions
DELETE FROM console_sessions WHERE token_id = %s;

-- name: forget_sessions
DELETE FROM console_sessions WHERE expires_at <= %s;





-- name: feed_window
-- Named parameters: after, scan. The end of the next window of at most scan log positions
-- after after: a feed read looks at no more entries than that (on the log's key).
SELECT coalesce(max(seq), %(after)s)
FROM (SELECT seq FROM log WHERE seq > %(after)s ORDER BY seq LIMIT %(scan)s) w;

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

-- name: log_position
-- The log's last position (0: empty).
SELECT coalesce(max(seq), 0) FROM log;

-- name: feed_count
-- Named parameters: inbox, after, scan. The inbox's sealed revisions after after, counted
-- over at most scan positions.
SELECT count(*)
FROM (SELECT inbox_id FROM log WHERE seq > %(after)s ORDER BY seq LIMIT %(scan)s) w
WHERE inbox_id = %(inbox)s;

-- name: consumer_put
INSERT INTO consumers (name, inbox_id, position, handed_out, created_at, updated_at)
VALUES (%s, %s, %s, %s, %s, %s)
ON CONFLICT (name) DO NOTHING;

-- name: consumer_get
SELECT name, inbox_id, position, handed_out, created_at, updated_at
FROM consumers WHERE name = %s FOR UPDATE;

-- name: consumers
SELECT name, inbox_id, position, handed_out, created_at, updated_at
FROM consumers ORDER BY name;

-- name: consumer_move
UPDATE consumers SET position = %s, handed_out = %s, updated_at = %s WHERE name = %s;

-- name: consumer_drop
DELETE FROM consumers WHERE name = %s;
