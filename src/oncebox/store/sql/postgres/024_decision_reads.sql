-- Migration 24 (PostgreSQL): a decision's lock and reads in one statement, and a
-- seal's likewise.
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

-- What a seal reads, in one statement: the log's lease, held (FOR UPDATE; with the
-- connection's own synchronous_commit set back, SET LOCAL, where p_level is given: a
-- transaction begun relaxed that appends commits durably), then, in queries of their
-- own (each a new snapshot, taken once the lease is held), what seal_reads gives: the
-- clock, the queue's next p_limit events, the log's last block of p_block entries and
-- the kept Merkle nodes. The lease comes as kind 'lease' (owner in a, token in b, name
-- in step, holder in state, issued_at in clock). It reads; the seal hashes in Python.
CREATE FUNCTION seal_reads_held(p_level text, p_limit integer, p_block integer)
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
  WHERE l.seq >= (SELECT (coalesce(max(t.seq), 1) - 1) / p_block * p_block + 1 FROM log t);
  RETURN QUERY
  SELECT 'node'::text, g.level::bigint, m.idx, NULL::text, NULL::text, NULL::text, m.hash,
         NULL::bigint, NULL::bigint, NULL::bigint, NULL::double precision,
         NULL::double precision, NULL::double precision
  FROM (SELECT coalesce(max(t.seq), 0) AS n FROM log t) AS h
  CROSS JOIN generate_series(4, 60, 4) AS g(level)
  JOIN merkle_nodes m ON m.level = g.level
       AND m.idx >= ((h.n >> g.level) >> 4) << 4 AND m.idx < (h.n >> g.level)
  WHERE (h.n >> g.level) > 0;
END;
$$;
