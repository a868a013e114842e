-- The statements both stores run as they are, by name; each backend's own queries.sql
-- holds only what differs (its locks, its JSON functions, PostgreSQL's batches of
-- column arrays). A name is in one file or the other, never both.
--
-- Written with SQLite's placeholders, positional (?) or named (:name), never both in
-- one statement. Loaded for PostgreSQL, they become psycopg's (%s, %(name)s) and a
-- literal % becomes %% (oncebox.store.sqlfile.to_psycopg); placeholders inside quotes
-- or comments are left alone. Portable SQL only: CAST(x AS type), not x::type, where
-- PostgreSQL needs to know a parameter's type.

-- Records ----------------------------------------------------------------------------

-- name: get_record
-- records_read: the record with its seal's log position, wherever the backend keeps it.
SELECT id, inbox_id, ident, identity, witness, revision, content, fields, first_seen,
       last_seen, seen_count, evicted_at, late_replays, device_time, snapshot_id, delivery_id,
       signature, log_seq, revised_at, octet_length(content) AS content_length, key
FROM records_read WHERE id = ?;

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

-- Quarantine -------------------------------------------------------------------------

-- name: quarantine_insert
-- DO NOTHING on the one-open-row-per-newcomer index: a newcomer waiting for an operator
-- returns no row. One an operator closed (kept, accepted) is decided again: a new row.
INSERT INTO quarantine (inbox_id, ident, identity, record_id, witness, content, fields,
                        reason, first_seen, last_seen, seen_count, device_time, snapshot_id,
                        delivery_id, signature, key)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (inbox_id, ident, witness) WHERE status = 'open' DO NOTHING
RETURNING id;

-- name: quarantine_repeat
UPDATE quarantine SET seen_count = seen_count + ?, last_seen = ?
WHERE inbox_id = ? AND ident = ? AND witness = ? AND status = 'open'
RETURNING id;

-- name: get_quarantine
SELECT id, inbox_id, ident, identity, record_id, witness, content, fields, reason, status,
       note, first_seen, last_seen, seen_count, resolved_at, device_time, snapshot_id,
       delivery_id, signature, resolved_by, octet_length(content) AS content_length, key
FROM quarantine WHERE id = ?;

-- name: close_quarantine
UPDATE quarantine SET status = ?, note = ?, resolved_at = ?, resolved_by = ?
WHERE id = ? AND status = 'open';

-- name: list_quarantine
-- A page after id :after. Every value a sender chose is read cut (:head bytes of the
-- content, :text characters of each text, :fields of the fields' JSON), so that a
-- listing never reads a whole large row; the content's length is read whole. (A blob
-- short enough is read as it is: SQLite's substr makes NULL of an empty blob.)
SELECT id, inbox_id, ident, substr(identity, 1, CAST(:text AS INTEGER)) AS identity,
       record_id, witness,
       CASE WHEN length(content) <= :head THEN content
            ELSE substr(content, 1, CAST(:head AS INTEGER)) END AS content,
       substr(fields, 1, CAST(:fields AS INTEGER)) AS fields, reason, status,
       substr(note, 1, CAST(:text AS INTEGER)) AS note,
       first_seen, last_seen, seen_count, resolved_at,
       substr(device_time, 1, CAST(:text AS INTEGER)) AS device_time,
       substr(snapshot_id, 1, CAST(:text AS INTEGER)) AS snapshot_id,
       substr(delivery_id, 1, CAST(:text AS INTEGER)) AS delivery_id, signature, resolved_by,
       octet_length(content) AS content_length, substr(key, 1, CAST(:text AS INTEGER)) AS key
FROM quarantine
WHERE (CAST(:inbox AS BIGINT) IS NULL OR inbox_id = :inbox)
  AND (CAST(:status AS TEXT) IS NULL OR status = :status)
  AND id > :after
ORDER BY id LIMIT :limit;

-- name: match_quarantine
-- Open rows a bulk resolution selects: an inbox, an identity prefix, first seen in
-- [:since, :until); after id :after, in id order, values cut as list_quarantine cuts them.
SELECT id, inbox_id, ident, substr(identity, 1, CAST(:text AS INTEGER)) AS identity,
       record_id, witness,
       CASE WHEN length(content) <= :head THEN content
            ELSE substr(content, 1, CAST(:head AS INTEGER)) END AS content,
       substr(fields, 1, CAST(:fields AS INTEGER)) AS fields, reason, status,
       substr(note, 1, CAST(:text AS INTEGER)) AS note,
       first_seen, last_seen, seen_count, resolved_at,
       substr(device_time, 1, CAST(:text AS INTEGER)) AS device_time,
       substr(snapshot_id, 1, CAST(:text AS INTEGER)) AS snapshot_id,
       substr(delivery_id, 1, CAST(:text AS INTEGER)) AS delivery_id, signature, resolved_by,
       octet_length(content) AS content_length
FROM quarantine
WHERE inbox_id = :inbox AND status = 'open'
  AND (CAST(:prefix AS TEXT) IS NULL
       OR substr(identity, 1, length(CAST(:prefix AS TEXT))) = :prefix)
  AND (CAST(:since AS DOUBLE PRECISION) IS NULL OR first_seen >= :since)
  AND (CAST(:until AS DOUBLE PRECISION) IS NULL OR first_seen < :until)
  AND id > :after
ORDER BY id LIMIT :limit;

-- name: count_quarantine_matching
-- How many match_quarantine would give without a limit, up to :most.
SELECT count(*) FROM (
  SELECT 1 FROM quarantine
  WHERE inbox_id = :inbox AND status = 'open'
    AND (CAST(:prefix AS TEXT) IS NULL
         OR substr(identity, 1, length(CAST(:prefix AS TEXT))) = :prefix)
    AND (CAST(:since AS DOUBLE PRECISION) IS NULL OR first_seen >= :since)
    AND (CAST(:until AS DOUBLE PRECISION) IS NULL OR first_seen < :until)
    AND id > :after
  LIMIT :most
) AS matching;

-- Dead letters -----------------------------------------------------------------------

-- name: dead_letter
INSERT INTO dead_letters (inbox_id, reason, detail, head, length, sha256, key, received_at,
                          device_time, snapshot_id, delivery_id, signature)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
RETURNING id;

-- name: mark_replayed
-- Delivered again and decided (accepted, duplicate, conflict): closed as replayed.
UPDATE dead_letters SET replayed_at = :now, replayed_by = :by, replay_verdict = :verdict,
       status = 'replayed', attempts = attempts + 1, last_tried = :now
WHERE id = :id;

-- name: mark_refused_again
-- Delivered again and refused again: the same dead letter, one attempt more. :status is
-- what it becomes (open), or NULL to leave it (a replay the fence refused stored nothing).
UPDATE dead_letters SET attempts = attempts + 1, last_reason = :reason, last_tried = :now,
       status = coalesce(CAST(:status AS TEXT), status)
WHERE id = :id;

-- name: archive_dead_letter
UPDATE dead_letters SET status = 'archived', archived_at = :now, archived_by = :by,
       archive_note = :note
WHERE id = :id AND status <> 'archived';

-- name: dead_letter_reasons
-- The reasons the dead letters of an inbox (every inbox: NULL) were refused for.
SELECT DISTINCT reason FROM dead_letters
WHERE (CAST(:inbox AS BIGINT) IS NULL OR inbox_id = :inbox) ORDER BY reason;

-- name: dead_letter_counts
-- How many dead letters an inbox keeps, by status and reason.
SELECT status, reason, count(*) FROM dead_letters WHERE inbox_id = :inbox
GROUP BY status, reason ORDER BY status, reason;

-- Counts -----------------------------------------------------------------------------

-- name: count_verdict
INSERT INTO verdict_counts (inbox_id, hour, verdict, reason, n) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (inbox_id, hour, verdict, reason) DO UPDATE
SET n = verdict_counts.n + excluded.n;

-- name: verdict_counts
SELECT verdict, reason, sum(n) FROM verdict_counts WHERE inbox_id = ?
GROUP BY verdict, reason;

-- name: verdict_hours
SELECT hour, verdict, sum(n) FROM verdict_counts WHERE inbox_id = ? AND hour >= ?
GROUP BY hour, verdict ORDER BY hour, verdict;

-- name: last_delivery
-- When the inbox last took a delivery, whatever its verdict: a record's or a quarantine
-- row's last arrival, or a dead letter's; NULL when it never took one.
SELECT max(t) FROM (
  SELECT max(last_seen) AS t FROM records WHERE inbox_id = :inbox
  UNION ALL SELECT max(last_seen) FROM quarantine WHERE inbox_id = :inbox
  UNION ALL SELECT max(received_at) FROM dead_letters WHERE inbox_id = :inbox
) AS arrivals;

-- name: inbox_figures
-- An inbox's figures (oncebox.store.sqltx.inboxes.FIGURES, in order), then the greatest
-- lateness its dropped tombstones had counted, which the store weighs against the
-- records' own.
SELECT
  (SELECT count(*) FROM records WHERE inbox_id = :inbox AND evicted_at IS NULL),
  (SELECT count(*) FROM records WHERE inbox_id = :inbox AND evicted_at IS NOT NULL),
  (SELECT coalesce(sum(seen_count - 1), 0) FROM records WHERE inbox_id = :inbox)
    + (SELECT dropped_duplicates FROM inboxes WHERE id = :inbox),
  (SELECT coalesce(sum(late_replays), 0) FROM records WHERE inbox_id = :inbox)
    + (SELECT dropped_late_replays FROM inboxes WHERE id = :inbox),
  (SELECT coalesce(max(max_lateness), 0) FROM records WHERE inbox_id = :inbox),
  (SELECT count(*) FROM quarantine WHERE inbox_id = :inbox AND status = 'open'),
  (SELECT count(*) FROM quarantine WHERE inbox_id = :inbox),
  (SELECT count(*) FROM dead_letters WHERE inbox_id = :inbox),
  (SELECT count(*) FROM evictions WHERE inbox_id = :inbox),
  (SELECT dropped_max_lateness FROM inboxes WHERE id = :inbox);

-- Retention --------------------------------------------------------------------------

-- name: evict_revisions
DELETE FROM revisions WHERE record_id IN (
  SELECT id FROM records WHERE inbox_id = ? AND evicted_at IS NOT NULL
);

-- name: carry_dropped_counts
-- What the dropped tombstones had counted stays on their inbox: counts never go down.
UPDATE inboxes
SET dropped_duplicates = dropped_duplicates + :duplicates,
    dropped_late_replays = dropped_late_replays + :late_replays,
    dropped_max_lateness = CASE WHEN dropped_max_lateness < :max_lateness
                                THEN :max_lateness ELSE dropped_max_lateness END
WHERE id = :inbox;

-- name: log_eviction
INSERT INTO evictions (inbox_id, kind, ident, witness, first_seen, evicted_at)
VALUES (?, ?, ?, ?, ?, ?);

-- name: evictions
SELECT id, inbox_id, kind, ident, witness, first_seen, evicted_at FROM evictions
WHERE (CAST(:inbox AS BIGINT) IS NULL OR inbox_id = :inbox) ORDER BY id LIMIT :limit;

-- name: record_retention_override
INSERT INTO retention_overrides (inbox_id, retention_seconds, reason, at)
VALUES (?, ?, ?, ?);

-- name: retention_overrides
SELECT retention_seconds, reason, at FROM retention_overrides WHERE inbox_id = ? ORDER BY id;

-- Inboxes ----------------------------------------------------------------------------

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

-- The fence --------------------------------------------------------------------------

-- name: next_token
UPDATE counters SET value = value + 1 WHERE name = 'lease_token' RETURNING value;

-- name: put_lease
INSERT INTO fences (kind, owner, name, token, holder, issued_at, expires_at, released_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (kind, owner, name) DO UPDATE
SET token = excluded.token, holder = excluded.holder, issued_at = excluded.issued_at,
    expires_at = excluded.expires_at, released_at = excluded.released_at;

-- name: list_leases
SELECT kind, owner, name, token, holder, issued_at, expires_at, released_at
FROM fences WHERE kind = ? AND owner = ? ORDER BY name;

-- The log and its seal queue ---------------------------------------------------------

-- name: log_head
SELECT seq, step, state, hash FROM log ORDER BY seq DESC LIMIT 1;

-- name: log_entries
SELECT seq, step, state, hash FROM log WHERE seq >= ? AND seq < ? ORDER BY seq;

-- name: log_rows
-- log_entries with the revision each entry puts on the feed (not hashed), for verify.
SELECT seq, step, state, hash, inbox_id, record_id, revision FROM log
WHERE seq >= ? AND seq < ? ORDER BY seq;

-- name: merkle_nodes
SELECT hash FROM merkle_nodes WHERE level = ? AND idx >= ? AND idx < ? ORDER BY idx;

-- name: meta
SELECT value FROM meta WHERE key = ?;

-- name: unsealed_records
-- Records with a NULL log_seq and no queued seal (left by an older version), for
-- recovery to seal. On PostgreSQL a record with log_seq = -1 always has a queued seal
-- or a position (see seal_positions), so it is not looked for here.
SELECT id, inbox_id, ident, identity, witness, revision, content, fields, first_seen,
       last_seen, seen_count, evicted_at, late_replays, device_time, snapshot_id, delivery_id,
       signature, log_seq, revised_at
FROM records
WHERE log_seq IS NULL
  AND id NOT IN (SELECT record_id FROM log_pending WHERE record_id IS NOT NULL)
ORDER BY id LIMIT ?;

-- name: record_seals
SELECT id, log_seq FROM records_read ORDER BY id;

-- name: pending_log
-- Only the sealer reads the queue, holding the log; queue order must not have holes
-- skipped. (SQLite prepares a statement again on every run when it looks at a bare
-- "LIMIT ?" parameter, about 6 us on every seal; through CAST it is a plain value.)
SELECT id, step, state, record_id, revision, inbox_id FROM log_pending
ORDER BY id LIMIT CAST(? AS INTEGER);

-- name: log_pending_count
SELECT count(*) FROM log_pending;

-- name: queued_seals
-- Records whose seal waits in the queue, with when each was accepted, for verify.
SELECT p.record_id, r.first_seen FROM log_pending p JOIN records r ON r.id = p.record_id
WHERE p.record_id IS NOT NULL;

-- name: last_pending_id
SELECT coalesce(max(id), 0) FROM log_pending;

-- name: probe_write
-- /readyz: a trivial write, so a full disk or a read-only store shows as not ready.
INSERT INTO meta (key, value) VALUES ('ready_probe', ?)
ON CONFLICT (key) DO UPDATE SET value = excluded.value;

-- Access: API tokens, signatures seen, console sessions ------------------------------

-- name: insert_token
-- DO NOTHING on the live-name index: a name already in use returns no row.
INSERT INTO api_tokens (name, secret_hash, inboxes, scopes, hmac_key, created_at, expires_at)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT DO NOTHING
RETURNING id;

-- name: token_by_hash
SELECT id, name, secret_hash, inboxes, scopes, hmac_key, created_at, revoked_at,
       expires_at, last_used_at
FROM api_tokens WHERE secret_hash = ?;

-- name: list_tokens
-- A page of tokens in id order after id ?; the inbox list (JSON text) read only to its
-- first ? characters, its whole length beside, so that a listing is bounded in bytes.
SELECT id, name, secret_hash, substr(inboxes, 1, CAST(? AS INTEGER)) AS inboxes, scopes,
       hmac_key, created_at, revoked_at, expires_at, last_used_at,
       length(inboxes) AS inboxes_length
FROM api_tokens WHERE id > ? ORDER BY id LIMIT ?;

-- name: list_tokens_newest
-- list_tokens newest first: the page below id ? (the last id of the page before).
SELECT id, name, secret_hash, substr(inboxes, 1, CAST(? AS INTEGER)) AS inboxes, scopes,
       hmac_key, created_at, revoked_at, expires_at, last_used_at,
       length(inboxes) AS inboxes_length
FROM api_tokens WHERE id < ? ORDER BY id DESC LIMIT ?;

-- name: token_named
-- The token a name stands for: the live one, else the newest of that name (revoked or
-- expired), read whole.
SELECT id, name, secret_hash, inboxes, scopes, hmac_key, created_at, revoked_at,
       expires_at, last_used_at
FROM api_tokens WHERE name = ?
ORDER BY revoked_at IS NULL DESC, id DESC LIMIT 1;

-- name: token_by_id
SELECT id, name, secret_hash, inboxes, scopes, hmac_key, created_at, revoked_at,
       expires_at, last_used_at
FROM api_tokens WHERE id = ?;

-- name: revoke_token
-- The ids of the tokens revoked (none: no live token by that name or id). A live name
-- wins: "2" names the live token called 2, never also the token whose id is 2.
UPDATE api_tokens SET revoked_at = ?
WHERE revoked_at IS NULL
  AND (name = ? OR (CAST(id AS TEXT) = ? AND NOT EXISTS (
        SELECT 1 FROM api_tokens AS named WHERE named.name = ? AND named.revoked_at IS NULL)))
RETURNING id;

-- name: touch_token
-- When a token was last used; a no-op while the kept time is newer than the cutoff, so
-- that processes racing on one token write it once.
UPDATE api_tokens SET last_used_at = ?
WHERE id = ? AND (last_used_at IS NULL OR last_used_at < ?);

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
-- A token's own expiry ends its sessions too: one past it finds nothing.
SELECT t.id, t.name, t.secret_hash, t.inboxes, t.scopes, t.hmac_key, t.created_at,
       t.revoked_at, t.expires_at, t.last_used_at, s.expires_at AS session_ends
FROM console_sessions s JOIN api_tokens t ON t.id = s.token_id
WHERE s.id_hash = ? AND s.expires_at > ? AND t.revoked_at IS NULL
  AND (t.expires_at IS NULL OR t.expires_at > ?);

-- name: end_session
DELETE FROM console_sessions WHERE id_hash = ?;

-- name: end_token_sessions
DELETE FROM console_sessions WHERE token_id = ?;

-- name: forget_sessions
DELETE FROM console_sessions WHERE expires_at <= ?;

-- Migrations (oncebox.store.migrate) -------------------------------------------------

-- name: migrations_applied
SELECT version, applied_at FROM schema_version ORDER BY version;

-- name: record_migration
INSERT INTO schema_version (version, applied_at, renumbered_from) VALUES (?, ?, ?);

-- name: add_renumbered_from
-- A store from before both backends numbered their migrations alike: each row's number
-- of that time is kept beside the shared one it became.
ALTER TABLE schema_version ADD COLUMN renumbered_from INTEGER;

-- name: forget_migrations
DELETE FROM schema_version;

-- name: step_migrations_applied
SELECT version FROM step_schema WHERE step = ? ORDER BY version;

-- name: record_step_migration
INSERT INTO step_schema (step, version, applied_at) VALUES (?, ?, ?);

-- Feed -------------------------------------------------------------------------------

-- name: feed_window
-- The end of the next window of at most :scan log positions after :after: a feed read
-- looks at no more entries than that (on the log's key), whatever the inbox.
SELECT coalesce(max(seq), :after)
FROM (SELECT seq FROM log WHERE seq > :after ORDER BY seq LIMIT :scan) w;

-- name: log_position
-- The log's last position (0: empty).
SELECT coalesce(max(seq), 0) FROM log;

-- name: feed_count
-- The inbox's sealed revisions after :after, counted over at most :scan positions.
SELECT count(*)
FROM (SELECT inbox_id FROM log WHERE seq > :after ORDER BY seq LIMIT :scan) w
WHERE inbox_id = :inbox;

-- name: consumer_put
INSERT INTO consumers (name, inbox_id, position, handed_out, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (name) DO NOTHING;

-- name: consumers
SELECT name, inbox_id, position, handed_out, created_at, updated_at
FROM consumers ORDER BY name;

-- name: consumer_move
UPDATE consumers SET position = ?, handed_out = ?, updated_at = ? WHERE name = ?;

-- name: consumer_drop
DELETE FROM consumers WHERE name = ?;

-- Finding records (oncebox.store.finding) -------------------------------------------
-- A key is found where it is the identity by the identity's unique index (a record or
-- newcomer whose key is unknown, kept before migration 19, counts when its identity is
-- the key), elsewhere by the key's own index (records_key, quarantine_key,
-- dead_letters_key: its first 256 characters, oncebox.store.finding.KEY_INDEXED).

-- name: record_start
SELECT inbox_id, first_seen FROM records WHERE id = ?;

-- name: records_keyed
SELECT id, ident, first_seen FROM records
WHERE inbox_id = :inbox AND ident = :ident AND (key = :key OR key IS NULL)
UNION ALL
SELECT id, ident, first_seen FROM records
WHERE inbox_id = :inbox AND substr(key, 1, 256) = :prefix AND key = :key
  AND key <> identity
ORDER BY 1 LIMIT :limit;

-- name: records_identified
SELECT id, ident, first_seen FROM records WHERE inbox_id = ? AND ident = ?;

-- name: quarantine_of
-- Values cut as list_quarantine cuts them.
SELECT id, inbox_id, ident, substr(identity, 1, CAST(:text AS INTEGER)) AS identity,
       record_id, witness,
       CASE WHEN length(content) <= :head THEN content
            ELSE substr(content, 1, CAST(:head AS INTEGER)) END AS content,
       substr(fields, 1, CAST(:fields AS INTEGER)) AS fields, reason, status,
       substr(note, 1, CAST(:text AS INTEGER)) AS note,
       first_seen, last_seen, seen_count, resolved_at,
       substr(device_time, 1, CAST(:text AS INTEGER)) AS device_time,
       substr(snapshot_id, 1, CAST(:text AS INTEGER)) AS snapshot_id,
       substr(delivery_id, 1, CAST(:text AS INTEGER)) AS delivery_id, signature, resolved_by,
       octet_length(content) AS content_length, substr(key, 1, CAST(:text AS INTEGER)) AS key
FROM quarantine
WHERE inbox_id = :inbox AND ident = :ident
ORDER BY id LIMIT :limit;

-- name: quarantine_keyed
-- Values cut as list_quarantine cuts them.
SELECT id, inbox_id, ident, substr(identity, 1, CAST(:text AS INTEGER)) AS identity,
       record_id, witness,
       CASE WHEN length(content) <= :head THEN content
            ELSE substr(content, 1, CAST(:head AS INTEGER)) END AS content,
       substr(fields, 1, CAST(:fields AS INTEGER)) AS fields, reason, status,
       substr(note, 1, CAST(:text AS INTEGER)) AS note,
       first_seen, last_seen, seen_count, resolved_at,
       substr(device_time, 1, CAST(:text AS INTEGER)) AS device_time,
       substr(snapshot_id, 1, CAST(:text AS INTEGER)) AS snapshot_id,
       substr(delivery_id, 1, CAST(:text AS INTEGER)) AS delivery_id, signature, resolved_by,
       octet_length(content) AS content_length, substr(key, 1, CAST(:text AS INTEGER)) AS key
FROM quarantine
WHERE id IN (
  SELECT id FROM quarantine
  WHERE inbox_id = :inbox AND ident = :ident AND (key = :key OR key IS NULL)
  UNION ALL
  SELECT id FROM quarantine
  WHERE inbox_id = :inbox AND substr(key, 1, 256) = :prefix AND key = :key
    AND key <> identity
)
ORDER BY id LIMIT :limit;

-- name: dead_letters_keyed
-- Values cut as list_dead_letters cuts them.
SELECT id, inbox_id, reason, substr(detail, 1, CAST(:text AS INTEGER)) AS detail,
       CASE WHEN length(head) <= :head THEN head
            ELSE substr(head, 1, CAST(:head AS INTEGER)) END AS head,
       length, sha256, substr(key, 1, CAST(:text AS INTEGER)) AS key, received_at,
       substr(device_time, 1, CAST(:text AS INTEGER)) AS device_time,
       substr(snapshot_id, 1, CAST(:text AS INTEGER)) AS snapshot_id,
       substr(delivery_id, 1, CAST(:text AS INTEGER)) AS delivery_id, signature, replayed_at,
       replayed_by, replay_verdict, octet_length(head) AS kept
FROM dead_letters
WHERE inbox_id = :inbox AND substr(key, 1, 256) = :prefix AND key = :key
ORDER BY id LIMIT :limit;

-- Forwarding (the outbox) -------------------------------------------------------------

-- name: forward_due
-- Whether any of a destination's forwards is due (claimed ones too): read before a claim,
-- so an idle dispatcher writes nothing.
SELECT 1 FROM forwards
WHERE destination = ? AND inbox_id = ? AND status IN ('pending', 'failed') AND next_at <= ?
LIMIT 1;

-- name: forward_get
SELECT id, inbox_id, destination, record_id, revision, order_key, status, attempts,
       schedule_at, next_at, created_at, updated_at, last_status, last_error, finished_at
FROM forwards WHERE id = ?;

-- name: forward_settle
-- What an attempt (or an operator) made of a forward.
UPDATE forwards
SET status = ?, attempts = ?, schedule_at = ?, next_at = ?, updated_at = ?, last_status = ?,
    last_error = ?, finished_at = ?
WHERE id = ?;

-- name: forward_attempt_add
INSERT INTO forward_attempts (forward_id, number, at, outcome, status, latency, answer, error,
                              next_at, dispatcher)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?);

-- name: forward_attempts
SELECT forward_id, number, at, outcome, status, latency, answer, error, next_at, dispatcher
FROM forward_attempts WHERE forward_id = ? ORDER BY id LIMIT ?;

-- name: forward_claim_drop
-- A finished claim's lease: the forward is settled, nothing is left to fence.
DELETE FROM fences WHERE kind = 'forward' AND owner = ? AND name = ?;

-- name: forward_revision
-- What a forward carries: one revision of a record, the record's or a superseded one's.
SELECT 0 AS position, r.id AS record_id, CAST(:revision AS INTEGER) AS revision, r.identity,
       CASE WHEN r.revision = :revision THEN r.witness ELSE v.witness END AS witness,
       CASE WHEN r.revision = :revision THEN r.fields ELSE v.fields END AS fields,
       CASE WHEN r.revision = :revision THEN r.content ELSE v.content END AS content,
       NULL AS content_length, r.first_seen,
       CASE WHEN :revision = 1 THEN r.first_seen
            WHEN r.revision = :revision THEN r.revised_at ELSE v.decided_at END AS decided_at,
       r.device_time, r.snapshot_id, r.delivery_id, r.signature
FROM records r LEFT JOIN revisions v ON v.record_id = r.id AND v.revision = :revision
WHERE r.id = :record;

-- name: destination_get
SELECT inbox_id, name, paused_at, paused_by, circuit, failures, open_until
FROM forward_destinations WHERE name = ?;

-- name: destinations_all
SELECT inbox_id, name, paused_at, paused_by, circuit, failures, open_until
FROM forward_destinations ORDER BY name;

-- name: destination_pause
-- An operator's pause or resume; the circuit's columns are the dispatchers', left alone
-- (on PostgreSQL a dispatcher may be writing them from a state read before this).
INSERT INTO forward_destinations (inbox_id, name, paused_at, paused_by)
VALUES (?, ?, ?, ?)
ON CONFLICT (name) DO UPDATE
SET inbox_id = excluded.inbox_id, paused_at = excluded.paused_at,
    paused_by = excluded.paused_by;

-- name: destination_circuit_new
-- A destination's first circuit, unless another dispatcher wrote one first (none
-- changed: read it again).
INSERT INTO forward_destinations (inbox_id, name, circuit, failures, open_until)
VALUES (?, ?, ?, ?, ?)
ON CONFLICT (name) DO NOTHING;

-- name: destination_circuit_swap
-- The circuit as a claim or a settle left it, only if it is still as it was read (none
-- changed: another dispatcher wrote it since; on PostgreSQL, in READ COMMITTED, this
-- waits for that one's commit and compares with what it wrote). An operator's pause is
-- left alone.
UPDATE forward_destinations
SET inbox_id = :inbox, circuit = :circuit, failures = :failures, open_until = :open_until
WHERE name = :name AND circuit = :was_circuit AND failures = :was_failures
  AND open_until IS NOT DISTINCT FROM CAST(:was_open_until AS DOUBLE PRECISION);

-- name: forward_count
INSERT INTO forward_counts (destination, hour, outcome, n) VALUES (?, ?, ?, ?)
ON CONFLICT (destination, hour, outcome) DO UPDATE SET n = forward_counts.n + excluded.n;

-- name: forward_counts_since
SELECT outcome, sum(n) FROM forward_counts
WHERE destination = ? AND hour >= ? GROUP BY outcome;

-- name: forward_backlog
-- The unfinished of its inbox (a name moved to another inbox: not the first one's, which
-- are never sent), counted, and when the oldest of them was accepted.
SELECT count(*), min(created_at) FROM forwards
WHERE destination = ? AND inbox_id = ? AND status IN ('pending', 'failed');

-- name: forward_dead_count
-- (the IN names forwards_failing's rows, so SQLite reads that partial index)
SELECT count(*) FROM forwards
WHERE destination = ? AND inbox_id = ? AND status = 'dead' AND status IN ('failed', 'dead');

-- name: forwards_of_record
-- forwards_listed for one record, through forwards_record (the record page's).
SELECT id, inbox_id, destination, record_id, revision, order_key, status, attempts,
       schedule_at, next_at, created_at, updated_at, last_status, last_error, finished_at
FROM forwards
WHERE record_id = :record AND id > :after
  AND (CAST(:destination AS TEXT) IS NULL OR destination = :destination)
  AND (CAST(:inbox AS BIGINT) IS NULL OR inbox_id = :inbox)
  AND (CAST(:status AS TEXT) IS NULL OR status = :status)
  AND (CAST(:since AS REAL) IS NULL OR created_at >= :since)
  AND (CAST(:until AS REAL) IS NULL OR created_at < :until)
ORDER BY id LIMIT :limit;

-- name: forwards_failing_listed
-- forwards_listed for one destination's failed or dead, through forwards_failing (the
-- outbound dead letters an operator lists and retries).
SELECT id, inbox_id, destination, record_id, revision, order_key, status, attempts,
       schedule_at, next_at, created_at, updated_at, last_status, last_error, finished_at
FROM forwards
WHERE destination = :destination AND status = :status AND status IN ('failed', 'dead')
  AND id > :after AND (CAST(:inbox AS BIGINT) IS NULL OR inbox_id = :inbox)
  AND (CAST(:since AS REAL) IS NULL OR created_at >= :since)
  AND (CAST(:until AS REAL) IS NULL OR created_at < :until)
  AND (CAST(:record AS BIGINT) IS NULL OR record_id = :record)
ORDER BY id LIMIT :limit;

-- name: forwards_listed
-- Named parameters: destination, inbox, status, since, until, record, after, limit; a
-- filter left null takes every value. In id order, after :after.
SELECT id, inbox_id, destination, record_id, revision, order_key, status, attempts,
       schedule_at, next_at, created_at, updated_at, last_status, last_error, finished_at
FROM forwards
WHERE id > :after
  AND (CAST(:destination AS TEXT) IS NULL OR destination = :destination)
  AND (CAST(:inbox AS BIGINT) IS NULL OR inbox_id = :inbox)
  AND (CAST(:status AS TEXT) IS NULL OR status = :status)
  AND (CAST(:since AS REAL) IS NULL OR created_at >= :since)
  AND (CAST(:until AS REAL) IS NULL OR created_at < :until)
  AND (CAST(:record AS BIGINT) IS NULL OR record_id = :record)
ORDER BY id LIMIT :limit;
