-- Operator skip: the lane's head, when it is pending, is set aside and its
-- lane moves on. Only the head: a row with a lower id of the same lane still
-- pending or in flight refuses the skip (storage.NotHead; the look is
-- queue_skip_refused.sql), so that a mistyped id cannot drop a message
-- queued behind a healthy head. The lane is the lane column alone
-- ("destination/key", storage.Delivery.Lane), as in the claim
-- (queue_claim_next.sql), so the head is the row the claim would take. No
-- race with the lane: ids only grow, and by the FIFO argument of
-- queue_claim_next.sql (b) no lower id of a lane can appear once a higher one
-- is seen; a finished row never comes back. So once no row is ahead, none
-- ever will be: the check cannot go stale in the direction that would skip a
-- row behind the head.
--
-- The head check is a scalar subquery with LIMIT 1, not a NOT EXISTS: a
-- subquery is run as a SubPlan, an index-only scan of mf_queue_lane_head on
-- (lane, id < this row's id), whose WHERE term it repeats so that the
-- partial index applies. A NOT EXISTS is planned as an anti join, and its
-- generic plan made on a nearly empty queue (a prepared statement keeps it)
-- read every entry of mf_queue_lane_head with the lane as a join filter.
-- The row itself is looked up by primary key (IS TRUE: see
-- queue_complete.sql).
UPDATE mf_queue
   SET status = 'dead', held = false, last_error = $2, last_error_detail = '', updated_at = now()
 WHERE id = $1 AND (status = 'pending') IS TRUE -- see queue_complete.sql
   AND (SELECT a.id
          FROM mf_queue a
         WHERE a.lane = mf_queue.lane AND a.status IN ('pending', 'inflight') AND a.id < mf_queue.id
         ORDER BY a.id
         LIMIT 1) IS NULL
 RETURNING message_id, destination
