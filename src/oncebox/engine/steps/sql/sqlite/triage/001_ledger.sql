-- triage, migration 1 (SQLite): the headcount ledger, a row per applied frame, and its
-- totals per site and need. IF NOT EXISTS: stores made before the step owned its tables
-- have them already, from the store's own migrations.
CREATE TABLE IF NOT EXISTS triage_ledger (
    record_id INTEGER PRIMARY KEY,
    inbox_id  INTEGER NOT NULL REFERENCES inboxes(id),
    site      TEXT NOT NULL,
    need      TEXT NOT NULL,
    headcount INTEGER NOT NULL,
    pri       INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS triage_totals (
    inbox_id  INTEGER NOT NULL REFERENCES inboxes(id),
    site      TEXT NOT NULL,
    need      TEXT NOT NULL,
    headcount INTEGER NOT NULL,
    cases     INTEGER NOT NULL,
    PRIMARY KEY (inbox_id, site, need)
) WITHOUT ROWID;
