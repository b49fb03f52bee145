UPDATE mf_queue
   SET lease_expires_at = clock_timestamp() + make_interval(secs => $4), updated_at = now() -- see queue_claim_next.sql
 WHERE id = $1 AND (status = 'inflight' AND lease_owner = $2 AND attempts = $3) IS TRUE -- see queue_complete.sql
