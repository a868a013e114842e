-- Migration 25 (PostgreSQL): a decision's lookup and a seal's read of the kept Merkle
-- nodes read by their whole index key, whatever the statistics say. Each read rows by
-- a join or an = ANY the planner may take apart: where the statistics said a table was
-- small (a store that grew faster than autovacuum analyzed it, as every benchmark's
-- fresh one does) it used the index's first column only and filtered the rest, a cost
-- that grew with the store: a decision read every record of its inbox (106 pages at
-- 1,000 records, now a few) and a seal every kept node of three levels (a tenth of the
-- log's length in rows). Each lookup is now a lateral subquery that OFFSET 0 keeps
-- apart from the join, so it is planned alone, by (inbox, identity) and by (level,
-- index range). And a seal's read of the log's last block (at most a block of entries
-- from a start only known as it runs, which a plan counts as a third of the log) was
-- planned, where the statistics knew no order in the log, as a read of the whole log
-- (1,848 pages at 160,000 entries); it is now ordered by position and limited to a
-- block, which only the log's index gives cheaply.

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

CREATE OR REPLACE FUNCTION seal_reads_held(p_level text, p_limit integer, p_block integer)
RETURNS TABLE (kind text, a bigint, b bigint, step text, state text, hash text,
               node bytea, record_id bigint, revision bigint, inbox_id bigint,
               clock double precision, expires_at double precision,
               released_at double precision)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
  IF p_level IS NOT NULL THEN
    PERFORM set_config('synchronous_commit', p_level, true);
  END IF;
  RETURN QUERY
  SELECT 'lease'::text, f.owner, f.token, f.name, f.holder, NULL::text, NULL::bytea,
         NULL::bigint, NULL::bigint, NULL::bigint, f.issued_at, f.expires_at, f.released_at
  FROM fences f
  WHERE f.kind = 'sealer' AND f.owner = 0 AND f.name = ''
  FOR UPDATE;
  RETURN QUERY
  SELECT 'clock'::text, NULL::bigint, NULL::bigint, NULL::text, NULL::text, NULL::text,
         NULL::bytea, NULL::bigint, NULL::bigint, NULL::bigint,
         extract(epoch FROM clock_timestamp())::double precision, NULL::double precision,
         NULL::double precision;
  RETURN QUERY
  SELECT 'pending'::text, p.id, NULL::bigint, p.step, p.state, NULL::text, NULL::bytea,
         p.record_id, p.revision, p.inbox_id, NULL::double precision,
         NULL::double precision, NULL::double precision
  FROM log_pending p ORDER BY p.id LIMIT p_limit;
  RETURN QUERY
  SELECT 'tail'::text, l.seq, NULL::bigint, l.step, l.state, l.hash, NULL::bytea,
         NULL::bigint, NULL::bigint, NULL::bigint, NULL::double precision,
         NULL::double precision, NULL::double precision
  FROM log l
  WHERE l.seq >= (SELECT (coalesce(max(t.seq), 1) - 1) / p_block * p_block + 1 FROM log t)
  ORDER BY l.seq LIMIT p_block;
  RETURN QUERY
  SELECT 'node'::text, g.level::bigint, m.idx, NULL::text, NULL::text, NULL::text, m.hash,
         NULL::bigint, NULL::bigint, NULL::bigint, NULL::double precision,
         NULL::double precision, NULL::double precision
  FROM (SELECT coalesce(max(t.seq), 0) AS n FROM log t) AS h
  CROSS JOIN generate_series(4, 60, 4) AS g(level)
  CROSS JOIN LATERAL (
    SELECT k.idx, k.hash FROM merkle_nodes k
    WHERE k.level = g.level AND k.idx >= ((h.n >> g.level) >> 4) << 4
      AND k.idx < (h.n >> g.level)
    OFFSET 0
  ) AS m
  WHERE (h.n >> g.level) > 0;
END;
$$;
