-- Migration 8 (PostgreSQL): the age index no longer leads with inbox_id. Led by
-- inbox_id it competed with the identity constraint's index, and a generic plan made
-- before a fresh store had statistics could pick it for identity lookups (a scan of the
-- whole inbox per delivery). Eviction reads oldest first either way.
DROP INDEX records_age;
CREATE INDEX records_age ON records (first_seen);
