-- The generation step's statements, PostgreSQL: work keys, their generations and the
-- reconciler's state. A worker's claim on a key is a lease of the one fence (kind 'work',
-- named by the key's parts joined by U+001F): the claim columns come from it.
-- Positional %s parameters unless a block says otherwise; "-- columnar": one array per
-- column for a whole batch.

-- name: bump_generations
-- columnar; one row per key (the step sums a batch's bumps), in key order; an upsert:
-- one row each.
-- foldable: reads only its parameters and its own table (store/pgfold.py).
INSERT INTO work_keys (inbox_id, seller_id, sku, marketplace_id, generation)
SELECT * FROM unnest(%b::bigint[], %b::text[], %b::text[], %b::text[], %b::bigint[])
ON CONFLICT (inbox_id, seller_id, sku, marketplace_id)
DO UPDATE SET generation = work_keys.generation + excluded.generation;

-- name: list_work_keys
-- Named parameters. A page of an inbox's work keys in key order, after the key (s, k, m)
-- if given; only dirty ones, or only those in review, if asked. A document longer than
-- fields characters is left out of the page (its length beside), the last error is cut
-- to text.
SELECT w.seller_id, w.sku, w.marketplace_id, w.generation, w.applied_generation,
       CASE WHEN length(w.document) <= %(fields)s::int THEN w.document END AS document,
       w.document_generation, w.applied_token, w.refreshed_at,
       CASE WHEN f.released_at IS NULL THEN f.token END AS claim_token, w.claim_generation,
       CASE WHEN f.released_at IS NULL THEN f.holder END AS claimed_by,
       CASE WHEN f.released_at IS NULL THEN f.expires_at END AS claim_expires,
       w.failures, w.next_attempt, left(w.last_error, %(text)s::int) AS last_error,
       w.in_review, length(w.document) AS document_length
FROM work_keys w LEFT JOIN fences f ON f.kind = 'work' AND f.owner = w.inbox_id AND f.name = w.seller_id || chr(31) || w.sku || chr(31) || w.marketplace_id
WHERE w.inbox_id = %(inbox)s AND (NOT %(dirty)s OR w.generation > w.applied_generation)
  AND (NOT %(review)s OR w.in_review = 1)
  AND (%(s)s::text IS NULL
       OR (w.seller_id, w.sku, w.marketplace_id) > (%(s)s, %(k)s, %(m)s))
ORDER BY w.seller_id, w.sku, w.marketplace_id LIMIT %(limit)s;

-- name: work_key
SELECT w.seller_id, w.sku, w.marketplace_id, w.generation, w.applied_generation, w.document,
       w.document_generation, w.applied_token, w.refreshed_at,
       CASE WHEN f.released_at IS NULL THEN f.token END AS claim_token, w.claim_generation,
       CASE WHEN f.released_at IS NULL THEN f.holder END AS claimed_by,
       CASE WHEN f.released_at IS NULL THEN f.expires_at END AS claim_expires,
       w.failures, w.next_attempt, w.last_error, w.in_review
FROM work_keys w LEFT JOIN fences f ON f.kind = 'work' AND f.owner = w.inbox_id AND f.name = w.seller_id || chr(31) || w.sku || chr(31) || w.marketplace_id
WHERE w.inbox_id = %s AND w.seller_id = %s AND w.sku = %s AND w.marketplace_id = %s;

-- name: work_key_for_update
SELECT w.seller_id, w.sku, w.marketplace_id, w.generation, w.applied_generation, w.document,
       w.document_generation, w.applied_token, w.refreshed_at,
       CASE WHEN f.released_at IS NULL THEN f.token END AS claim_token, w.claim_generation,
       CASE WHEN f.released_at IS NULL THEN f.holder END AS claimed_by,
       CASE WHEN f.released_at IS NULL THEN f.expires_at END AS claim_expires,
       w.failures, w.next_attempt, w.last_error, w.in_review
FROM work_keys w LEFT JOIN fences f ON f.kind = 'work' AND f.owner = w.inbox_id AND f.name = w.seller_id || chr(31) || w.sku || chr(31) || w.marketplace_id
WHERE w.inbox_id = %s AND w.seller_id = %s AND w.sku = %s AND w.marketplace_id = %s
FOR UPDATE OF w;

-- name: dirty_keys
SELECT w.seller_id, w.sku, w.marketplace_id, w.generation, w.applied_generation, w.document,
       w.document_generation, w.applied_token, w.refreshed_at,
       CASE WHEN f.released_at IS NULL THEN f.token END AS claim_token, w.claim_generation,
       CASE WHEN f.released_at IS NULL THEN f.holder END AS claimed_by,
       CASE WHEN f.released_at IS NULL THEN f.expires_at END AS claim_expires,
       w.failures, w.next_attempt, w.last_error, w.in_review
FROM work_keys w LEFT JOIN fences f ON f.kind = 'work' AND f.owner = w.inbox_id AND f.name = w.seller_id || chr(31) || w.sku || chr(31) || w.marketplace_id
WHERE w.inbox_id = %s AND w.generation > w.applied_generation
ORDER BY w.seller_id, w.sku, w.marketplace_id LIMIT %s;

-- name: next_claimable
-- Named parameters: inbox, now. A dirty key nobody holds a live lease on (none,
-- released, or run out on the server clock), not in review and not backing off. SKIP
-- LOCKED: workers racing for keys each take a different one instead of queueing.
SELECT w.seller_id, w.sku, w.marketplace_id, w.generation, w.applied_generation, w.document,
       w.document_generation, w.applied_token, w.refreshed_at,
       CASE WHEN f.released_at IS NULL THEN f.token END AS claim_token, w.claim_generation,
       CASE WHEN f.released_at IS NULL THEN f.holder END AS claimed_by,
       CASE WHEN f.released_at IS NULL THEN f.expires_at END AS claim_expires,
       w.failures, w.next_attempt, w.last_error, w.in_review
FROM work_keys w LEFT JOIN fences f ON f.kind = 'work' AND f.owner = w.inbox_id AND f.name = w.seller_id || chr(31) || w.sku || chr(31) || w.marketplace_id
WHERE w.inbox_id = %(inbox)s AND w.generation > w.applied_generation AND w.in_review = 0
  AND w.next_attempt <= %(now)s
  AND (f.token IS NULL OR f.released_at IS NOT NULL OR f.expires_at < %(now)s)
ORDER BY w.next_attempt, w.seller_id, w.sku, w.marketplace_id
LIMIT 1
FOR UPDATE OF w SKIP LOCKED;

-- name: claimed
UPDATE work_keys SET claim_generation = generation
WHERE inbox_id = %s AND seller_id = %s AND sku = %s AND marketplace_id = %s;

-- name: apply_document
UPDATE work_keys
SET document = %s, document_generation = %s, applied_generation = %s, applied_token = %s,
    refreshed_at = %s, claim_generation = NULL, failures = 0, next_attempt = 0,
    last_error = NULL
WHERE inbox_id = %s AND seller_id = %s AND sku = %s AND marketplace_id = %s;

-- name: unclaimed
UPDATE work_keys SET claim_generation = NULL
WHERE inbox_id = %s AND seller_id = %s AND sku = %s AND marketplace_id = %s;

-- name: record_failure
UPDATE work_keys
SET failures = %s, next_attempt = %s, last_error = %s, in_review = %s, claim_generation = NULL
WHERE inbox_id = %s AND seller_id = %s AND sku = %s AND marketplace_id = %s;

-- name: retry_work
UPDATE work_keys SET in_review = 0, failures = 0, next_attempt = 0, last_error = NULL
WHERE inbox_id = %s AND seller_id = %s AND sku = %s AND marketplace_id = %s AND in_review = 1;

-- name: work_figures
-- Named parameters: inbox, now.
SELECT
  count(*),
  count(*) FILTER (WHERE w.generation > w.applied_generation),
  coalesce(sum(w.in_review), 0),
  count(*) FILTER (WHERE f.token IS NOT NULL AND f.released_at IS NULL
                   AND f.expires_at >= %(now)s)
FROM work_keys w LEFT JOIN fences f ON f.kind = 'work' AND f.owner = w.inbox_id AND f.name = w.seller_id || chr(31) || w.sku || chr(31) || w.marketplace_id
WHERE w.inbox_id = %(inbox)s;
