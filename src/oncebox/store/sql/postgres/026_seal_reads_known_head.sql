-- Migration 26 (PostgreSQL): a seal that knows where the log ends reads no more of it,
-- and a decision's reads take its identities as they are.
--
-- A connection keeps the Merkle tree's right edge its last committed append left
-- (store/postgres.py); seal_reads_held now takes that append's last position and chain
-- hash (p_seq, p_hash). Once the lease is held (no append can come in between), where
-- the log's head is still that entry it comes alone, as kind 'head', instead of the
-- last block's entries and the kept nodes (about two dozen rows, and their reads): the
-- same seq and hash chain the same entries, so the kept edge is the tree's. Where the
-- head moved (another connection appended, or the append rolled back) or no position is
-- given, the rows are those of migration 25. The two new arguments default to NULL, so
-- a caller of the old three gets what it got.
DROP FUNCTION seal_reads_held(text, integer, integer);

CREATE FUNCTION seal_reads_held(p_level text, p_limit integer, p_block integer,
                                p_seq bigint DEFAULT NULL, p_hash text DEFAULT NULL)
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
  IF p_seq IS NOT NULL THEN
    RETURN QUERY
    SELECT 'head'::text, l.seq, NULL::bigint, l.step, l.state, l.hash, NULL::bytea,
           NULL::bigint, NULL::bigint, NULL::bigint, NULL::double precision,
           NULL::double precision, NULL::double precision
    FROM (SELECT t.seq, t.step, t.state, t.hash FROM log t ORDER BY t.seq DESC LIMIT 1) AS l
    WHERE l.seq = p_seq AND l.hash = p_hash;
    IF FOUND THEN
      RETURN;
    END IF;
  END IF;
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

-- decision_reads_locked takes the batch's identities as a bytea[] (a single delivery's
-- one is sent as a bytea, store/pgscalars.py) where it took a JSON array of hex digests
-- that every call parsed and decoded. The array is read through a
-- scalar subquery, so the plan never knows its length: PL/pgSQL keeps one generic plan
-- (with the length known, it planned the query again on every call, 200 us and more).
-- The same rows in the same order.
DROP FUNCTION decision_reads_locked(integer, json, boolean);

-- The records' identity column draws from records_id_seq, the name PostgreSQL gave it
-- when the table was made: decision_reads_locked names it, where it looked it up by
-- table and column for every fresh id (a catalog scan each, a third of the lookup's
-- time). A store whose sequence is named otherwise is refused here, not misnumbered.
DO $$
BEGIN
  IF pg_get_serial_sequence('records', 'id')::regclass <> 'records_id_seq'::regclass THEN
    RAISE EXCEPTION 'the records'' id sequence is %, not records_id_seq',
      pg_get_serial_sequence('records', 'id');
  END IF;
END
$$;

CREATE FUNCTION decision_reads_locked(p_inbox integer, p_idents bytea[], p_relaxed boolean)
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
  WHERE w.ident <> ALL (ARRAY(SELECT f.ident FROM found f))
  UNION ALL
  SELECT 'clock'::text, NULL::bigint, NULL::bytea, NULL::bytea, NULL::integer,
         NULL::double precision, extract(epoch FROM clock_timestamp())::double precision,
         NULL::bigint;
END;
$$;
