-- Park the claimed head: pending (still the lane head, so the lane waits)
-- and held (so no claim takes it) until an operator acts.
UPDATE mf_queue
   SET status = 'pending', held = true, lease_owner = '', lease_expires_at = NULL,
       last_error = $4, last_error_detail = $5, updated_at = now()
 WHERE id = $1 AND (status = 'inflight' AND lease_owner = $2 AND attempts = $3) IS TRUE -- see queue_complete.sql
