-- Migration 24 (PostgreSQL): a decision's lock and reads in one statement.
-- What a decision reads, in one statement, for an inbox that is not lease-fenced: the
-- inbox's shared lock (with the relaxed beginning's SET LOCAL where asked), then, in a
-- query of its own, decision_lookup's rows (the clock, the stored records, the fresh
-- ids). A function, because a statement reads the snapshot taken as it starts, before
-- the lock is granted; inside a VOLATILE function at READ COMMITTED each query takes a
-- new one, so the lookup sees what committed while the lock was waited for, as it did
-- when it came in the statement after the lock's. The decision itself stays in Python.
CREATE FUNCTION decision_reads_locked(p_inbox integer, p_idents json, p_relaxed boolean)
RETURNS TABLE (kind text, id bigint, ident bytea, witness bytea, revision integer,
               evicted_at double precision, first_seen double precision, log_seq bigint)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
  PERFORM pg_advisory_xact_lock_shared(3, p_inbox);
  IF p_relaxed THEN
    PERFORM set_config('synchronous_commit', 'off', true);
  END IF;
  RETURN QUERY
  WITH wanted AS (
    SELECT DISTINCT decode(value, 'hex') AS ident FROM json_array_elements_text(p_idents)
  ), found AS (
    SELECT 'stored'::text AS kind, r.id, r.ident, r.witness, r.revision, r.evicted_at,
           r.first_seen, r.log_seq
    FROM records_read r
    WHERE r.inbox_id = p_inbox AND r.ident = ANY (ARRAY(SELECT w.ident FROM wanted w))
  )
  SELECT f.kind, f.id, f.ident, f.witness, f.revision, f.evicted_at, f.first_seen, f.log_seq
  FROM found f
  UNION ALL
  SELECT 'fresh'::text, nextval(pg_get_serial_sequence('records', 'id')), NULL::bytea,
         NULL::bytea, NULL::integer, NULL::double precision, NULL::double precision,
         NULL::bigint
  FROM wanted w
  WHERE w.ident <> ALL (ARRAY(SELECT f.ident FROM found f))
  UNION ALL
  SELECT 'clock'::text, NULL::bigint, NULL::bytea, NULL::bytea, NULL::integer,
         NULL::double precision, extract(epoch FROM clock_timestamp())::double precision,
         NULL::bigint;
END;
$$;
