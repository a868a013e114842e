-- Migration 25 (PostgreSQL): a decision's lookup reads each identity by the whole
-- identity index. It read records whose identity is one of the batch's (= ANY of an
-- array): a plan made while the statistics said the table was small (a store that grew
-- faster than autovacuum analyzed it, every benchmark's fresh one) took the index's
-- first column only and filtered every record of the inbox, a cost that grew with the
-- store (1,000 records: 113 buffers and 0.19 ms a single delivery; now 6 and 0.07).
-- Each identity now comes from a lateral subquery that OFFSET 0 keeps apart from the
-- join, so it is planned as one lookup by (inbox, identity): one row at most.
CREATE OR REPLACE FUNCTION decision_reads_locked(p_inbox integer, p_idents json, p_relaxed boolean)
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
    FROM wanted w CROSS JOIN LATERAL (
      SELECT * FROM records_read s WHERE s.inbox_id = p_inbox AND s.ident = w.ident OFFSET 0
    ) r
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
