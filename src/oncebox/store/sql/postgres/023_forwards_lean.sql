-- Migration 23 (PostgreSQL): a forward written with its record costs one index entry less.
-- Listing by destination and status had an index over every forward, written in the
-- deciding transaction for each; the listings that need one are of the failing and the
-- dead (an operator's, a few among many): the pending are found through forwards_due,
-- and the delivered are most rows, so walking the table in id order finds a page at once.
DROP INDEX forwards_listed;
CREATE INDEX forwards_failing ON forwards (destination, status, id)
    WHERE status IN ('failed', 'dead');
-- A forward's inbox is its record's, copied in the transaction that checked the record's:
-- checking it again cost a trigger call for each forward, half the price of writing it
-- (inboxes are never deleted).
ALTER TABLE forwards DROP CONSTRAINT forwards_inbox_id_fkey;
