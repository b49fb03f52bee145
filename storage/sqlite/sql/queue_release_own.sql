-- Gives back every row of a lane in flight under one owner's lease
-- (storage.Store.QueueReleaseOwn): pending again, in place, its attempt
-- taken back, exactly as queue_give_back.sql gives back one claim. The lane
-- calls it, holding no row, after a write of its that claims rows failed
-- with its outcome unknown (a reply lost after the commit): the rows that
-- write may have claimed were never sent. The WHERE term of the partial
-- index mf_queue_lane_head is repeated verbatim, so that SQLite seeks it by
-- lane. ?1 lane, ?2 owner.
UPDATE mf_queue
   SET status = 'pending', lease_owner = '', lease_expires_at = NULL,
       attempts = attempts - 1,
       updated_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
 WHERE lane = ?1 AND status IN ('pending', 'inflight')
   AND status = 'inflight' AND lease_owner = ?2
