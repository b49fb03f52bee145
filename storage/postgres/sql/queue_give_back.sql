-- Gives back a claimed row that was never sent (storage.Store.QueueGiveBack):
-- pending again, in place, as if the claim had not been made, its attempt
-- taken back, so that rows a lane claimed ahead of a failing head do not
-- run out of attempts they never made. Only the claim that is still current
-- (same owner, same attempt, in flight) may; IS TRUE as in
-- queue_complete.sql, so that the row is looked up by primary key. $4 and
-- $5, when $4 is not empty, say why its send wrote nothing (the destination
-- unreachable), kept as its last error for GET /lanes.
UPDATE mf_queue
   SET status = 'pending', lease_owner = '', lease_expires_at = NULL,
       attempts = attempts - 1, updated_at = now(),
       last_error = CASE WHEN $4::text = '' THEN last_error ELSE $4::text END,
       last_error_detail = CASE WHEN $4::text = '' THEN last_error_detail ELSE $5::text END
 WHERE id = $1 AND (status = 'inflight' AND lease_owner = $2 AND attempts = $3) IS TRUE
