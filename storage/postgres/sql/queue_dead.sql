-- Set aside: no longer the lane head, so the lane moves on.
UPDATE mf_queue
   SET status = 'dead', lease_owner = '', lease_expires_at = NULL,
       last_error = $4, last_error_detail = $5, updated_at = now()
 WHERE id = $1 AND (status = 'inflight' AND lease_owner = $2 AND attempts = $3) IS TRUE -- see queue_complete.sql
