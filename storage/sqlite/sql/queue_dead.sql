-- Set aside: no longer the lane head, so the lane moves on.
-- ?1 id, ?2 owner, ?3 attempt, ?4 error, ?5 its detail.
UPDATE mf_queue
   SET status = 'dead', lease_owner = '', lease_expires_at = NULL,
       last_error = ?4, last_error_detail = ?5, updated_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
 WHERE id = ?1 AND status = 'inflight' AND lease_owner = ?2 AND attempts = ?3
