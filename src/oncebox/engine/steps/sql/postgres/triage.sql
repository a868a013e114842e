-- The triage step's statements, PostgreSQL: the headcount ledger and its totals.
-- A block marked "-- columnar" runs once for a whole batch, one array per column.

-- name: ledger_inserts
-- columnar
INSERT INTO triage_ledger (record_id, inbox_id, site, need, headcount, pri)
SELECT * FROM unnest(%b::bigint[], %b::bigint[], %b::text[], %b::text[], %b::int[], %b::int[]);

-- name: totals_add
INSERT INTO triage_totals (inbox_id, site, need, headcount, cases) VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (inbox_id, site, need) DO UPDATE
SET headcount = triage_totals.headcount + excluded.headcount,
    cases = triage_totals.cases + excluded.cases;

-- name: lock_totals
-- Totals rows are few and hot, and batches reach them in whatever order their frames
-- name sites and needs: one lock per inbox's totals (advisory lock space 2), held to
-- commit, turns those would-be deadlocks into a short queue.
SELECT pg_advisory_xact_lock(2, %s::int);

-- name: ledger_get
SELECT record_id, site, need, headcount, pri FROM triage_ledger WHERE record_id = %s
FOR UPDATE;

-- name: ledger_update
UPDATE triage_ledger SET site = %s, need = %s, headcount = %s, pri = %s WHERE record_id = %s;

-- name: ledger_totals
SELECT site, need, headcount, cases FROM triage_totals
WHERE inbox_id = %s AND cases > 0 ORDER BY site, need;

-- name: ledger_arrivals
-- Per site and need: what counting every arrival would give (each record's headcount
-- times the times it arrived); a record retention dropped counts once.
SELECT l.site, l.need, sum(l.headcount * coalesce(r.seen_count, 1)),
       sum(coalesce(r.seen_count, 1))
FROM triage_ledger l LEFT JOIN records r ON r.id = l.record_id
WHERE l.inbox_id = %s GROUP BY l.site, l.need ORDER BY l.site, l.need;

-- name: ledger_ranking
SELECT record_id, site, need, headcount, pri FROM triage_ledger
WHERE inbox_id = %s ORDER BY pri DESC, headcount DESC, record_id;

-- name: ledger_sites
-- Each site's last delivery: the latest arrival of a record its rows came from (NULL
-- once retention dropped them all).
SELECT l.site, max(r.last_seen)
FROM triage_ledger l LEFT JOIN records r ON r.id = l.record_id
WHERE l.inbox_id = %s GROUP BY l.site ORDER BY l.site;
