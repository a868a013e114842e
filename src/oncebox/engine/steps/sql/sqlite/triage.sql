-- The triage step's statements, SQLite: the headcount ledger and its totals.

-- name: ledger_inserts
INSERT INTO triage_ledger (record_id, inbox_id, site, need, headcount, pri)
VALUES (?, ?, ?, ?, ?, ?);

-- name: totals_add
INSERT INTO triage_totals (inbox_id, site, need, headcount, cases) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (inbox_id, site, need) DO UPDATE
SET headcount = headcount + excluded.headcount, cases = cases + excluded.cases;

-- name: ledger_get
SELECT record_id, site, need, headcount, pri FROM triage_ledger WHERE record_id = ?;

-- name: ledger_update
UPDATE triage_ledger SET site = ?, need = ?, headcount = ?, pri = ? WHERE record_id = ?;

-- name: ledger_totals
SELECT site, need, headcount, cases FROM triage_totals
WHERE inbox_id = ? AND cases > 0 ORDER BY site, need;

-- name: ledger_arrivals
-- Per site and need: what counting every arrival would give (each record's headcount
-- times the times it arrived); a record retention dropped counts once.
SELECT l.site, l.need, sum(l.headcount * coalesce(r.seen_count, 1)),
       sum(coalesce(r.seen_count, 1))
FROM triage_ledger l LEFT JOIN records r ON r.id = l.record_id
WHERE l.inbox_id = ? GROUP BY l.site, l.need ORDER BY l.site, l.need;

-- name: ledger_ranking
SELECT record_id, site, need, headcount, pri FROM triage_ledger
WHERE inbox_id = ? ORDER BY pri DESC, headcount DESC, record_id;

-- name: ledger_sites
-- Each site's last delivery: the latest arrival of a record its rows came from (NULL
-- once retention dropped them all).
SELECT l.site, max(r.last_seen)
FROM triage_ledger l LEFT JOIN records r ON r.id = l.record_id
WHERE l.inbox_id = ? GROUP BY l.site ORDER BY l.site;
