-- The recurring sweep: only rows whose lease has expired.
UPDATE mf_queue
   SET status = 'pending', lease_owner = '', lease_expires_at = NULL,
       updated_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
 WHERE status = 'inflight' AND lease_expires_at <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
