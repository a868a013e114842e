-- Migration 13 (SQLite): what a signed webhook's verified signature vouched for,
-- kept beside the other transport facts (device_time, snapshot_id, delivery_id) on
-- records, quarantine and dead letters. A compact JSON object (scheme, signed_at,
-- key_signed), NULL for a delivery that was not signed by its sender; never a secret.
ALTER TABLE records ADD COLUMN signature TEXT;
ALTER TABLE quarantine ADD COLUMN signature TEXT;
ALTER TABLE dead_letters ADD COLUMN signature TEXT;
