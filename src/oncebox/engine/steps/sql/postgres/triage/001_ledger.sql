-- triage, migration 1 (PostgreSQL): the headcount ledger, a row per applied frame, and
-- its totals per site and need. IF NOT EXISTS: stores made before the step owned its
-- tables have them already, from the store's own migrations.
CREATE TABLE IF NOT EXISTS triage_ledger (
    record_id bigint PRIMARY KEY,
    inbox_id  bigint NOT NULL REFERENCES inboxes(id),
    site      text NOT NULL,
    need      text NOT NULL,
    headcount bigint NOT NULL,
    pri       bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS triage_totals (
    inbox_id  bigint NOT NULL REFERENCES inboxes(id),
    site      text NOT NULL,
    need      text NOT NULL,
    headcount bigint NOT NULL,
    cases     bigint NOT NULL,
    PRIMARY KEY (inbox_id, site, need)
);
