-- Migration 15 (SQLite): an inbox's counts never go down.
-- Duplicates and late replays are counted on the record they repeat, and a tombstone
-- dropped at its horizon took its counts with it, so the inbox's figures fell. What a
-- dropped tombstone had counted is carried on its inbox from now on.
ALTER TABLE inboxes ADD COLUMN dropped_duplicates INTEGER NOT NULL DEFAULT 0;
ALTER TABLE inboxes ADD COLUMN dropped_late_replays INTEGER NOT NULL DEFAULT 0;
ALTER TABLE inboxes ADD COLUMN dropped_max_lateness REAL NOT NULL DEFAULT 0;
