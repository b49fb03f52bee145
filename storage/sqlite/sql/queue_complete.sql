-- Only the claim that is still current may finish the row: same owner, same
-- attempt, still inflight (even if its lease expired, no one re-claimed it).
-- ?1 id, ?2 owner, ?3 attempt.
UPDATE mf_queue
   SET status = 'done', lease_owner = '', lease_expires_at = NULL,
       updated_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
 WHERE id = ?1 AND status = 'inflight' AND lease_owner = ?2 AND attempts = ?3
