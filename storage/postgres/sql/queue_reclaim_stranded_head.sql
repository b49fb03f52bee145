-- Lane claim, step 1 of 3 (see queue_claim_next.sql for the argument), for
-- the lanes in $1 at once: each lane's in-flight row whose lease has expired
-- goes back to pending. Only the head of a lane can be in flight, so this is
-- the lane's stranded head.
UPDATE mf_queue
   SET status = 'pending', lease_owner = '', lease_expires_at = NULL, updated_at = now()
 WHERE lane = ANY($1::text[]) AND status = 'inflight' AND lease_expires_at <= now()
