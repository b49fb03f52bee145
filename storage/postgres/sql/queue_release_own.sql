-- Gives back every row of a lane in flight under one owner's lease
-- (storage.Store.QueueReleaseOwn): pending again, in place, its attempt
-- taken back, exactly as queue_give_back.sql gives back one claim. The lane
-- calls it, holding no row, after a write of its that claims rows failed
-- with its outcome unknown (a reply lost after the commit): the rows that
-- write may have claimed were never sent. $1 lane, $2 owner. Found through
-- mf_queue_lane_head by lane (status = 'inflight' implies its predicate).
UPDATE mf_queue
   SET status = 'pending', lease_owner = '', lease_expires_at = NULL,
       attempts = attempts - 1, updated_at = now()
 WHERE lane = $1 AND status = 'inflight' AND lease_owner = $2
