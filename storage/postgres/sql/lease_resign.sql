-- Expire the lease now and wake the followers (NOTIFY is delivered at commit;
-- the payload is the schema, so that followers of another schema ignore it).
WITH resigned AS (
    UPDATE mf_leader_lease
       SET expires_at = LEAST(expires_at, now())
     WHERE name = 'leader' AND owner = $1 AND term = $2
    RETURNING term
)
SELECT pg_notify('mf_leader_resigned', current_schema()) FROM resigned
