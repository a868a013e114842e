-- Migration 14 (PostgreSQL): a seal writes a narrow row of its own instead of
-- rewriting the record it seals.
-- Updating records.log_seq copied the whole record (content included) and, since the
-- column is in the records_unsealed predicate, added an entry to each of its indexes,
-- the random-order identity index among them: the most expensive write of a seal, done
-- while the seal holds the log. Records decided from now on are inserted with
-- log_seq = -1: "sealed through the queue", whose position, once sealed, is its row in
-- seal_positions (engine-queued events and their seals commit with the record and with
-- each other, so such a record always has a queued event or a position). They never
-- enter records_unsealed; a NULL log_seq (an older version's record, or one tampered
-- with) still means unsealed and is still found and set there by recovery.
CREATE TABLE seal_positions (
    record_id bigint PRIMARY KEY,
    seq       bigint NOT NULL
);
