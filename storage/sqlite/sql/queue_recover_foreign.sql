-- Promotion recovery: owner-scoped and lease-blind. Every row in flight under
-- another owner is re-pended at once, live lease or not: the fence guarantees
-- that owner is no longer acting (its term is over), so waiting out the
-- lease would only delay failover. Rows of this owner are left alone.
-- ?1 this owner.
UPDATE mf_queue
   SET status = 'pending', lease_owner = '', lease_expires_at = NULL,
       updated_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
 WHERE status = 'inflight' AND lease_owner <> ?1
