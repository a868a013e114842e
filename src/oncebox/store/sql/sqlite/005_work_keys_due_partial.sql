-- Migration 5 (SQLite): the claim query looks only at dirty keys; an index that also
-- holds every clean key makes each claim scan them, and a full drain quadratic. Keep
-- only the dirty ones.
DROP INDEX work_keys_due;
CREATE INDEX work_keys_due ON work_keys (inbox_id, in_review, next_attempt)
    WHERE generation > applied_generation;
