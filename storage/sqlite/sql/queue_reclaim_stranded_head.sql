-- Lane claim, step 1 of 3 (see queue_claim_next.sql for the argument): this
-- lane's in-flight row whose lease has expired goes back to pending. Only the
-- head of a lane can be in flight, so this is the lane's stranded head.
-- ?1 lane.
UPDATE mf_queue
   SET status = 'pending', lease_owner = '', lease_expires_at = NULL,
       updated_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
 WHERE lane = ?1 AND status = 'inflight'
   AND lease_expires_at <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
