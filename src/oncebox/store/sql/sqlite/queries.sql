-- Every statement the SQLite store runs, by name. Loaded once by oncebox.store.sqlfile.

-- name: find_records
-- A batch's identities in one statement (a JSON array of hex digests): only what a
-- decision needs, no content.
SELECT id, ident, witness, revision, evicted_at, first_seen, log_seq
FROM records WHERE inbox_id = ? AND ident IN (SELECT unhex(value) FROM json_each(?));

-- name: get_record
SELECT id, inbox_id, ident, identity, witness, revision, content, fields, first_seen,
       last_seen, seen_count, evicted_at, late_replays, device_time, snapshot_id, delivery_id,
       signature, log_seq, revised_at, length(content) AS content_length
FROM records WHERE id = ?;

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
       length(r.content) AS content_length
FROM quarantine q JOIN records r ON r.inbox_id = q.inbox_id AND r.ident = q.ident
WHERE q.id IN (SELECT value FROM json_each(:ids));

-- name: insert_records
-- Run once per row, ids reserved by reserve_record_ids. DO NOTHING: one a concurrent
-- writer inserted first is not counted, and the engine decides again.
INSERT INTO records (id, inbox_id, ident, identity, witness, content, fields, first_seen,
                     last_seen, device_time, snapshot_id, delivery_id, signature,
                     log_seq)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (inbox_id, ident) DO NOTHING;

-- name: reserve_record_ids
-- The next ids after every record there is or was (retention remembers the highest it
-- dropped), one row each; the write lock BEGIN IMMEDIATE holds keeps them ours.
WITH RECURSIVE used(top) AS (
  SELECT max(coalesce((SELECT max(id) FROM records), 0),
             coalesce((SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'record_ids_used'), 0))
), n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < CAST(? AS INTEGER))
SELECT top + i FROM used, n ORDER BY i;

-- name: remember_dropped_id
INSERT INTO meta (key, value) VALUES ('record_ids_used', CAST(? AS TEXT))
ON CONFLICT (key) DO UPDATE
SET value = CAST(max(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER)) AS TEXT);

-- name: count_duplicates
-- Run once per (record id, repeats, now).
UPDATE records SET seen_count = seen_count + ?2, last_seen = ?3 WHERE id = ?1;

-- name: count_late_replays
-- Run once per (record id, repeats, now, greatest lateness).
UPDATE records
SET late_replays = late_replays + ?2, last_seen = ?3, max_lateness = max(max_lateness, ?4)
WHERE id = ?1;

-- name: keep_revision
INSERT INTO revisions (record_id, revision, witness, content, fields, decided_at,
                       superseded_at, note)
VALUES (?, ?, ?, ?, ?, ?, ?, ?);

-- name: revise_record
UPDATE records
SET witness = ?, content = ?, fields = ?, revision = revision + 1, last_seen = ?,
    revised_at = ?
WHERE id = ?
RETURNING revision;

-- name: revisions
SELECT record_id, revision, witness, content, fields, decided_at, superseded_at, note
FROM revisions WHERE record_id = ? ORDER BY revision;

-- name: quarantine_insert
INSERT INTO quarantine (inbox_id, ident, identity, record_id, witness, content, fields,
                        reason, first_seen, last_seen, seen_count, device_time, snapshot_id,
                        delivery_id, signature)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (inbox_id, ident, witness) DO NOTHING
RETURNING id;

-- name: quarantine_repeat
UPDATE quarantine SET seen_count = seen_count + ?, last_seen = ?
WHERE inbox_id = ? AND ident = ? AND witness = ?
RETURNING id;

-- name: get_quarantine
SELECT id, inbox_id, ident, identity, record_id, witness, content, fields, reason, status,
       note, first_seen, last_seen, seen_count, resolved_at, device_time, snapshot_id,
       delivery_id, signature, resolved_by, length(content) AS content_length
FROM quarantine WHERE id = ?;

-- name: get_quarantine_for_update
-- BEGIN IMMEDIATE already holds the database's one write lock.
SELECT id, inbox_id, ident, identity, record_id, witness, content, fields, reason, status,
       note, first_seen, last_seen, seen_count, resolved_at, device_time, snapshot_id,
       delivery_id, signature, resolved_by, length(content) AS content_length
FROM quarantine WHERE id = ?;


-- name: close_quarantine
UPDATE quarantine SET status = ?, note = ?, resolved_at = ?, resolved_by = ?
WHERE id = ? AND status = 'open';

-- name: list_quarantine
-- A page after id :after. Every value a sender chose is read cut (:head bytes of the
-- content, :text characters of each text, :fields of the fields' JSON), so that a
-- listing never reads a whole large row; the content's length is read whole. (A blob
-- short enough is read as it is: SQLite's substr makes NULL of an empty blob.)
SELECT id, inbox_id, ident, substr(identity, 1, :text) AS identity, record_id, witness,
       CASE WHEN length(content) <= :head THEN content
            ELSE substr(content, 1, :head) END AS content,
       substr(fields, 1, :fields) AS fields, reason,
       status, substr(note, 1, :text) AS note, first_seen, last_seen, seen_count, resolved_at,
       substr(device_time, 1, :text) AS device_time,
       substr(snapshot_id, 1, :text) AS snapshot_id,
       substr(delivery_id, 1, :text) AS delivery_id, signature, resolved_by,
       length(content) AS content_length
FROM quarantine
WHERE (:inbox IS NULL OR inbox_id = :inbox) AND (:status IS NULL OR status = :status)
  AND id > :after
ORDER BY id LIMIT :limit;

-- name: dead_letter
INSERT INTO dead_letters (inbox_id, reason, detail, head, length, sha256, key, received_at,
                          device_time, snapshot_id, delivery_id, signature)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
RETURNING id;

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
       replay_verdict, length(head) AS kept
FROM dead_letters
WHERE (:inbox IS NULL OR inbox_id = :inbox) AND (:reason IS NULL OR reason = :reason)
  AND (:since IS NULL OR received_at >= :since) AND (:until IS NULL OR received_at < :until)
  AND (:search IS NULL OR instr(head, CAST(:search AS BLOB)) > 0)
  AND id > :after
ORDER BY id LIMIT :limit;

-- name: get_dead_letter
SELECT id, inbox_id, reason, detail, head, length, sha256, key, received_at, device_time,
       snapshot_id, delivery_id, signature, replayed_at, replayed_by, replay_verdict,
       length(head) AS kept
FROM dead_letters WHERE id = ?;

-- name: mark_replayed
UPDATE dead_letters SET replayed_at = ?, replayed_by = ?, replay_verdict = ? WHERE id = ?;

-- name: count_verdict
INSERT INTO verdict_counts (inbox_id, hour, verdict, reason, n) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (inbox_id, hour, verdict, reason) DO UPDATE SET n = n + excluded.n;

-- name: verdict_counts
SELECT verdict, reason, sum(n) FROM verdict_counts WHERE inbox_id = ? GROUP BY verdict, reason;

-- name: verdict_hours
SELECT hour, verdict, sum(n) FROM verdict_counts WHERE inbox_id = ? AND hour >= ?
GROUP BY hour, verdict ORDER BY hour, verdict;

-- name: inbox_figures
SELECT
  (SELECT count(*) FROM records WHERE inbox_id = :inbox AND evicted_at IS NULL),
  (SELECT count(*) FROM records WHERE inbox_id = :inbox AND evicted_at IS NOT NULL),
  (SELECT coalesce(sum(seen_count - 1), 0) FROM records WHERE inbox_id = :inbox)
    + (SELECT dropped_duplicates FROM inboxes WHERE id = :inbox),
  (SELECT coalesce(sum(late_replays), 0) FROM records WHERE inbox_id = :inbox)
    + (SELECT dropped_late_replays FROM inboxes WHERE id = :inbox),
  max((SELECT coalesce(max(max_lateness), 0) FROM records WHERE inbox_id = :inbox),
      (SELECT dropped_max_lateness FROM inboxes WHERE id = :inbox)),
  (SELECT count(*) FROM quarantine WHERE inbox_id = :inbox AND status = 'open'),
  (SELECT count(*) FROM quarantine WHERE inbox_id = :inbox),
  (SELECT count(*) FROM dead_letters WHERE inbox_id = :inbox),
  (SELECT count(*) FROM evictions WHERE inbox_id = :inbox);

-- name: evict_records
-- Turn the oldest records into tombstones: identity digest, witness and times stay.
WITH doomed AS (
  SELECT id FROM records
  WHERE inbox_id = :inbox AND evicted_at IS NULL AND first_seen < :cutoff
  ORDER BY first_seen LIMIT :limit
)
UPDATE records SET evicted_at = :now, content = NULL, fields = NULL, identity = NULL
WHERE id IN (SELECT id FROM doomed)
RETURNING id AS record_id, ident, witness, first_seen;

-- name: evict_revisions
DELETE FROM revisions WHERE record_id IN (
  SELECT id FROM records WHERE inbox_id = ? AND evicted_at IS NOT NULL
);

-- name: drop_tombstones
DELETE FROM records
WHERE id IN (
  SELECT id FROM records
  WHERE inbox_id = :inbox AND evicted_at IS NOT NULL AND first_seen < :cutoff
  ORDER BY first_seen LIMIT :limit
)
RETURNING id AS record_id, ident, witness, first_seen, seen_count - 1 AS duplicates,
          late_replays, max_lateness;

-- name: carry_dropped_counts
-- What the dropped tombstones had counted stays on their inbox: counts never go down.
UPDATE inboxes
SET dropped_duplicates = dropped_duplicates + :duplicates,
    dropped_late_replays = dropped_late_replays + :late_replays,
    dropped_max_lateness = max(dropped_max_lateness, :max_lateness)
WHERE id = :inbox;

-- name: log_eviction
INSERT INTO evictions (inbox_id, kind, ident, witness, first_seen, evicted_at)
VALUES (?, ?, ?, ?, ?, ?);

-- name: evictions
SELECT id, inbox_id, kind, ident, witness, first_seen, evicted_at FROM evictions
WHERE (:inbox IS NULL OR inbox_id = :inbox) ORDER BY id LIMIT :limit;

-- name: record_retention_override
INSERT INTO retention_overrides (inbox_id, retention_seconds, reason, at) VALUES (?, ?, ?, ?);

-- name: retention_overrides
SELECT retention_seconds, reason, at FROM retention_overrides WHERE inbox_id = ? ORDER BY id;

-- name: declare_inbox
INSERT INTO inboxes (name, codec, apply, retention_seconds, tombstone_seconds, fenced)
VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (name) DO UPDATE
SET apply = excluded.apply, retention_seconds = excluded.retention_seconds,
    tombstone_seconds = excluded.tombstone_seconds, fenced = excluded.fenced;

-- name: get_inbox
SELECT id, name, codec, apply, retention_seconds, tombstone_seconds, fenced
FROM inboxes WHERE name = ?;

-- name: inboxes
SELECT id, name, codec, apply, retention_seconds, tombstone_seconds, fenced
FROM inboxes ORDER BY name;

-- name: next_token
UPDATE counters SET value = value + 1 WHERE name = 'lease_token' RETURNING value;

-- name: held_leases
-- BEGIN IMMEDIATE already holds the database's one write lock: nothing more to hold.
SELECT kind, owner, name, token, holder, issued_at, expires_at, released_at
FROM fences WHERE kind = ? AND owner = ? AND name IN (SELECT value FROM json_each(?));

-- name: held_leases_exclusive
-- The same: SQLite has one writer at a time whatever is read.
SELECT kind, owner, name, token, holder, issued_at, expires_at, released_at
FROM fences WHERE kind = ? AND owner = ? AND name IN (SELECT value FROM json_each(?));

-- name: put_lease
INSERT INTO fences (kind, owner, name, token, holder, issued_at, expires_at, released_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (kind, owner, name) DO UPDATE
SET token = excluded.token, holder = excluded.holder, issued_at = excluded.issued_at,
    expires_at = excluded.expires_at, released_at = excluded.released_at;

-- name: list_leases
SELECT kind, owner, name, token, holder, issued_at, expires_at, released_at
FROM fences WHERE kind = ? AND owner = ? ORDER BY name;

-- name: log_head
SELECT seq, step, state, hash FROM log ORDER BY seq DESC LIMIT 1;

-- name: append_log
-- An entry that seals a record's revision names it (inbox, record, revision): its seq is
-- that revision's feed position.
INSERT INTO log (seq, step, state, hash, inbox_id, record_id, revision)
VALUES (?, ?, ?, ?, ?, ?, ?);

-- name: log_entries
SELECT seq, step, state, hash FROM log WHERE seq >= ? AND seq < ? ORDER BY seq;

-- name: merkle_nodes
SELECT hash FROM merkle_nodes WHERE level = ? AND idx >= ? AND idx < ? ORDER BY idx;

-- name: put_merkle_node
INSERT INTO merkle_nodes (level, idx, hash) VALUES (?, ?, ?);

-- name: unsealed_records
SELECT id, inbox_id, ident, identity, witness, revision, content, fields, first_seen,
       last_seen, seen_count, evicted_at, late_replays, device_time, snapshot_id, delivery_id,
       signature, log_seq, revised_at
FROM records
WHERE log_seq IS NULL
  AND id NOT IN (SELECT record_id FROM log_pending WHERE record_id IS NOT NULL)
ORDER BY id LIMIT ?;

-- name: mark_sealed
UPDATE records SET log_seq = ? WHERE id = ? AND log_seq IS NULL;

-- name: record_seals
SELECT id, log_seq FROM records ORDER BY id;

-- name: meta
SELECT value FROM meta WHERE key = ?;

-- name: queue_logs
INSERT INTO log_pending (step, state, record_id, revision, inbox_id) VALUES (?, ?, ?, ?, ?);

-- name: pending_log
-- A bare "LIMIT ?" is a parameter the planner looks at, so SQLite prepares the statement
-- again on every run (about 6 us each, on every seal); through CAST it is a plain value.
SELECT id, step, state, record_id, revision, inbox_id FROM log_pending
ORDER BY id LIMIT CAST(? AS INTEGER);

-- name: drop_pending
DELETE FROM log_pending WHERE id = ?;

-- name: log_pending_count
SELECT count(*) FROM log_pending;

-- name: last_pending_id
SELECT coalesce(max(id), 0) FROM log_pending;

-- name: probe_write
-- /readyz: a trivial write, so a full disk or a read-only store shows as not ready.
INSERT INTO meta (key, value) VALUES ('ready_probe', ?)
ON CONFLICT (key) DO UPDATE SET value = excluded.value;

-- name: insert_token
-- DO NOTHING on the live-name index: a name already in use returns no row.
INSERT INTO api_tokens (name, secret_hash, inboxes, scopes, hmac_key, created_at)
VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT DO NOTHING
RETURNING id;

-- name: token_by_hash
SELECT id, name, secret_hash, inboxes, scopes, hmac_key, created_at, revoked_at
FROM api_tokens WHERE secret_hash = ?;

-- name: list_tokens
SELECT id, name, secret_hash, inboxes, scopes, hmac_key, created_at, revoked_at
FROM api_tokens ORDER BY id;

-- name: revoke_token
-- The ids of the tokens revoked (none: no live token by that name or id).
UPDATE api_tokens SET revoked_at = ?
WHERE revoked_at IS NULL AND (name = ? OR CAST(id AS TEXT) = ?)
RETURNING id;

-- name: forget_signatures
DELETE FROM seen_signatures WHERE expires_at <= ?;

-- name: claim_signature
-- A row back: first use (or the old use's window has passed). None: a replay.
INSERT INTO seen_signatures (signature, expires_at) VALUES (?, ?)
ON CONFLICT (signature) DO UPDATE SET expires_at = excluded.expires_at
WHERE seen_signatures.expires_at <= ?
RETURNING signature;

-- name: insert_session
INSERT INTO console_sessions (id_hash, token_id, created_at, expires_at)
VALUES (?, ?, ?, ?);

-- name: session_token
-- A session that has not expired, with its token, only while the token is live.
SELECT t.id, t.name, t.secret_hash, t.inboxes, t.scopes, t.hmac_key, t.created_at,
       t.revoked_at, s.expires_at
FROM console_sessions s JOIN api_tokens t ON t.id = s.token_id
WHERE s.id_hash = ? AND s.expires_at > ? AND t.revoked_at IS NULL;

-- name: end_session
DELETE FROM console_sessions WHERE id_hash = ?;

-- name: end_token_sessions
DELETE FROM console_sessions WHERE token_id = ?;

-- name: forget_sessions
DELETE FROM console_sessions WHERE expires_at <= ?;





-- name: feed_window
-- The end of the next window of at most :scan log positions after :after: a feed read
-- looks at no more entries than that (on the log's key), whatever the inbox.
SELECT coalesce(max(seq), :after)
FROM (SELECT seq FROM log WHERE seq > :after ORDER BY seq LIMIT :scan);

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

-- name: log_position
-- The log's last position (0: empty).
SELECT coalesce(max(seq), 0) FROM log;

-- name: feed_count
-- The inbox's sealed revisions after :after, counted over at most :scan positions.
SELECT count(*) FROM (SELECT inbox_id FROM log WHERE seq > :after ORDER BY seq LIMIT :scan)
WHERE inbox_id = :inbox;

-- name: consumer_put
INSERT INTO consumers (name, inbox_id, position, handed_out, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (name) DO NOTHING;

-- name: consumer_get
-- BEGIN IMMEDIATE already holds the database's one write lock: nothing more to lock.
SELECT name, inbox_id, position, handed_out, created_at, updated_at
FROM consumers WHERE name = ?;

-- name: consumers
SELECT name, inbox_id, position, handed_out, created_at, updated_at
FROM consumers ORDER BY name;

-- name: consumer_move
UPDATE consumers SET position = ?, handed_out = ?, updated_at = ? WHERE name = ?;

-- name: consumer_drop
DELETE FROM consumers WHERE name = ?;
