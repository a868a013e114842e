-- The generation step's statements, SQLite: work keys, their generations and the
-- reconciler's state. A worker's claim on a key is a lease of the one fence (kind 'work',
-- named by the key's parts joined by U+001F): the claim columns come from it.

-- name: bump_generations
-- One row per key (the step sums a batch's bumps), in key order.
INSERT INTO work_keys (inbox_id, seller_id, sku, marketplace_id, generation)
VALUES (?, ?, ?, ?, ?)
ON CONFLICT (inbox_id, seller_id, sku, marketplace_id)
DO UPDATE SET generation = generation + excluded.generation;

-- name: list_work_keys
-- A page of an inbox's work keys in key order, after the key (:s, :k, :m) if given; only
-- dirty ones, or only those in review, if asked. A document longer than :fields
-- characters is left out of the page (its length beside), the last error is cut to :text.
SELECT w.seller_id, w.sku, w.marketplace_id, w.generation, w.applied_generation,
       CASE WHEN length(w.document) <= :fields THEN w.document END AS document,
       w.document_generation, w.applied_token, w.refreshed_at,
       CASE WHEN f.released_at IS NULL THEN f.token END AS claim_token, w.claim_generation,
       CASE WHEN f.released_at IS NULL THEN f.holder END AS claimed_by,
       CASE WHEN f.released_at IS NULL THEN f.expires_at END AS claim_expires,
       w.failures, w.next_attempt, substr(w.last_error, 1, :text) AS last_error, w.in_review,
       length(w.document) AS document_length
FROM work_keys w LEFT JOIN fences f ON f.kind = 'work' AND f.owner = w.inbox_id AND f.name = w.seller_id || char(31) || w.sku || char(31) || w.marketplace_id
WHERE w.inbox_id = :inbox AND (NOT :dirty OR w.generation > w.applied_generation)
  AND (NOT :review OR w.in_review = 1)
  AND (:s IS NULL OR (w.seller_id, w.sku, w.marketplace_id) > (:s, :k, :m))
ORDER BY w.seller_id, w.sku, w.marketplace_id LIMIT :limit;

-- name: work_key
-- (BEGIN IMMEDIATE already holds the database's one write lock: no row lock to take.)
SELECT w.seller_id, w.sku, w.marketplace_id, w.generation, w.applied_generation, w.document,
       w.document_generation, w.applied_token, w.refreshed_at,
       CASE WHEN f.released_at IS NULL THEN f.token END AS claim_token, w.claim_generation,
       CASE WHEN f.released_at IS NULL THEN f.holder END AS claimed_by,
       CASE WHEN f.released_at IS NULL THEN f.expires_at END AS claim_expires,
       w.failures, w.next_attempt, w.last_error, w.in_review
FROM work_keys w LEFT JOIN fences f ON f.kind = 'work' AND f.owner = w.inbox_id AND f.name = w.seller_id || char(31) || w.sku || char(31) || w.marketplace_id
WHERE w.inbox_id = ? AND w.seller_id = ? AND w.sku = ? AND w.marketplace_id = ?;

-- name: dirty_keys
SELECT w.seller_id, w.sku, w.marketplace_id, w.generation, w.applied_generation, w.document,
       w.document_generation, w.applied_token, w.refreshed_at,
       CASE WHEN f.released_at IS NULL THEN f.token END AS claim_token, w.claim_generation,
       CASE WHEN f.released_at IS NULL THEN f.holder END AS claimed_by,
       CASE WHEN f.released_at IS NULL THEN f.expires_at END AS claim_expires,
       w.failures, w.next_attempt, w.last_error, w.in_review
FROM work_keys w LEFT JOIN fences f ON f.kind = 'work' AND f.owner = w.inbox_id AND f.name = w.seller_id || char(31) || w.sku || char(31) || w.marketplace_id
WHERE w.inbox_id = ? AND w.generation > w.applied_generation
ORDER BY w.seller_id, w.sku, w.marketplace_id LIMIT ?;

-- name: next_claimable
-- A dirty key nobody holds a live lease on (none, released, or run out on the server
-- clock), not in review and not backing off.
SELECT w.seller_id, w.sku, w.marketplace_id, w.generation, w.applied_generation, w.document,
       w.document_generation, w.applied_token, w.refreshed_at,
       CASE WHEN f.released_at IS NULL THEN f.token END AS claim_token, w.claim_generation,
       CASE WHEN f.released_at IS NULL THEN f.holder END AS claimed_by,
       CASE WHEN f.released_at IS NULL THEN f.expires_at END AS claim_expires,
       w.failures, w.next_attempt, w.last_error, w.in_review
FROM work_keys w LEFT JOIN fences f ON f.kind = 'work' AND f.owner = w.inbox_id AND f.name = w.seller_id || char(31) || w.sku || char(31) || w.marketplace_id
WHERE w.inbox_id = :inbox AND w.generation > w.applied_generation AND w.in_review = 0
  AND w.next_attempt <= :now
  AND (f.token IS NULL OR f.released_at IS NOT NULL OR f.expires_at < :now)
ORDER BY w.next_attempt, w.seller_id, w.sku, w.marketplace_id LIMIT 1;

-- name: claimed
UPDATE work_keys SET claim_generation = generation
WHERE inbox_id = ? AND seller_id = ? AND sku = ? AND marketplace_id = ?;

-- name: apply_document
UPDATE work_keys
SET document = ?, document_generation = ?, applied_generation = ?, applied_token = ?,
    refreshed_at = ?, claim_generation = NULL, failures = 0, next_attempt = 0, last_error = NULL
WHERE inbox_id = ? AND seller_id = ? AND sku = ? AND marketplace_id = ?;

-- name: unclaimed
UPDATE work_keys SET claim_generation = NULL
WHERE inbox_id = ? AND seller_id = ? AND sku = ? AND marketplace_id = ?;

-- name: record_failure
UPDATE work_keys
SET failures = ?, next_attempt = ?, last_error = ?, in_review = ?, claim_generation = NULL
WHERE inbox_id = ? AND seller_id = ? AND sku = ? AND marketplace_id = ?;

-- name: retry_work
UPDATE work_keys SET in_review = 0, failures = 0, next_attempt = 0, last_error = NULL
WHERE inbox_id = ? AND seller_id = ? AND sku = ? AND marketplace_id = ? AND in_review = 1;

-- name: work_figures
SELECT
  count(*),
  coalesce(sum(w.generation > w.applied_generation), 0),
  coalesce(sum(w.in_review), 0),
  coalesce(sum(f.token IS NOT NULL AND f.released_at IS NULL AND f.expires_at >= :now), 0)
FROM work_keys w LEFT JOIN fences f ON f.kind = 'work' AND f.owner = w.inbox_id AND f.name = w.seller_id || char(31) || w.sku || char(31) || w.marketplace_id
WHERE w.inbox_id = :inbox;
