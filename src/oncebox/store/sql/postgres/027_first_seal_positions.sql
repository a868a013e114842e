-- Migration 27 (PostgreSQL): records whose seal kept a later position than their first
-- (before the fix that came with migration 26) get their first position back.
--
-- When one seal took both a record's own entry (its accept, or recovery's entry for it)
-- and a later entry naming the same record (the resolve that accepted a newcomer as its
-- next revision), the seal kept whichever of the two its sort by record id met first,
-- often the later. A record's position is the first entry that names it: every later
-- one (a revision) is appended after its own, and quarantine, eviction and replay
-- entries name no record in this column. So the right position is the lowest seq that
-- names the record, and only records named by more than one entry can be wrong.
--
-- One pass over the log (no index leads to record_id: writes never need one), then the
-- narrow seal_positions rows and, for records whose log_seq a seal set in the row itself
-- (those an older version left unsealed), that log_seq; each only where it is later.
CREATE TEMPORARY TABLE first_seals ON COMMIT DROP AS
SELECT record_id, min(seq) AS seq
FROM log
WHERE record_id IS NOT NULL
GROUP BY record_id
HAVING count(*) > 1;

UPDATE seal_positions p SET seq = f.seq
FROM first_seals f
WHERE p.record_id = f.record_id AND p.seq > f.seq;

UPDATE records r SET log_seq = f.seq
FROM first_seals f
WHERE r.id = f.record_id AND r.log_seq > f.seq;
