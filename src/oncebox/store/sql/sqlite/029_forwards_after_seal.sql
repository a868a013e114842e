-- Migration 29 (SQLite): a forward is claimed only once its revision is sealed (its seal
-- no longer queued), on both backends, so that what was handed on is in the log. The
-- claim looks its revision up in the queue: indexed here, where the queue is empty
-- unless sealing is deferred (and then it may be long).
CREATE INDEX log_pending_revision ON log_pending (record_id, revision)
WHERE record_id IS NOT NULL;
