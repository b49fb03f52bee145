-- The recurring sweep: only rows whose lease has expired.
UPDATE mf_queue
   SET status = 'pending', lease_owner = '', lease_expires_at = NULL, updated_at = now()
 WHERE status = 'inflight' AND lease_expires_at <= now()
