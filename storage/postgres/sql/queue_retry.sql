-- Back to pending in place (same id: still the lane head), due after the delay.
UPDATE mf_queue
   SET status = 'pending', lease_owner = '', lease_expires_at = NULL,
       next_attempt_at = clock_timestamp() + make_interval(secs => $4), -- see queue_claim_next.sql
       last_error = $5, last_error_detail = $6, updated_at = now()
 WHERE id = $1 AND (status = 'inflight' AND lease_owner = $2 AND attempts = $3) IS TRUE -- see queue_complete.sql
