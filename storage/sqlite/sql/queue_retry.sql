-- Back to pending in place (same id: still the lane head), due after the delay.
-- ?1 id, ?2 owner, ?3 attempt, ?4 delay in milliseconds, ?5 error, ?6 its detail.
UPDATE mf_queue
   SET status = 'pending', lease_owner = '', lease_expires_at = NULL,
       next_attempt_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER) + ?4,
       last_error = ?5, last_error_detail = ?6, updated_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
 WHERE id = ?1 AND status = 'inflight' AND lease_owner = ?2 AND attempts = ?3
