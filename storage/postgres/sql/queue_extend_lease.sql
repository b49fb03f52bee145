UPDATE mf_queue
   SET lease_expires_at = now() + make_interval(secs => $4), updated_at = now()
 WHERE id = $1 AND (status = 'inflight' AND lease_owner = $2 AND attempts = $3) IS TRUE -- see queue_complete.sql
