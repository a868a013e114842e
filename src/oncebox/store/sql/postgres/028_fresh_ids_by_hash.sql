-- Migration 28 (PostgreSQL): a decision's lookup gives fresh ids without a batch's square.
--
-- A decision's lookup finds the identities it did not find (each to get a fresh id)
-- by a hash of those it found: NOT IN (a hashed subplan). It compared each wanted
-- identity with every found one (<> ALL of an array), a batch's square: a batch of
-- 1,000 stored identities made a million comparisons, about 6 us of the server's a
-- delivery, half of the lookup. Identities are never NULL, so NOT IN gives the same rows.
CREATE OR REPLACE FUNCTION decision_reads_locked(p_inbox integer, p_idents bytea[], p_relaxed boolean)
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
    SELECT DISTINCT w.ident FROM unnest((SELECT p_idents)) AS w(ident)
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
  SELECT 'fresh'::text, nextval('records_id_seq'::regclass), NULL::bytea,
         NULL::bytea, NULL::integer, NULL::double precision, NULL::double precision,
         NULL::bigint
  FROM wanted w
  WHERE w.ident NOT IN (SELECT f.ident FROM found f)
  UNION ALL
  SELECT 'clock'::text, NULL::bigint, NULL::bytea, NULL::bytea, NULL::integer,
         NULL::double precision, extract(epoch FROM clock_timestamp())::double precision,
         NULL::bigint;
END;
$$;
