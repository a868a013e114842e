-- generation, migration 2 (PostgreSQL): a worker's claim on a work key is a lease of
-- the one fence (kind 'work', named by the key's three parts joined by U+001F, which no
-- work key part holds), no longer columns of its own. Claims held now stay held.
INSERT INTO fences (kind, owner, name, token, holder, issued_at, expires_at, released_at)
SELECT 'work', inbox_id, seller_id || chr(31) || sku || chr(31) || marketplace_id,
       claim_token, claimed_by, 0, claim_expires, NULL
FROM work_keys WHERE claim_token IS NOT NULL;
ALTER TABLE work_keys DROP COLUMN claim_token, DROP COLUMN claimed_by,
    DROP COLUMN claim_expires;
