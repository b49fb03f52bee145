-- Only the claim that is still current may finish the row: same owner, same
-- attempt, still inflight (even if its lease expired, no one re-claimed it).
--
-- The conditions beside the id are wrapped in IS TRUE so that the planner
-- cannot use a partial index on status (mf_queue_lane_head's predicate is
-- implied by status = 'inflight') and always looks the row up by primary
-- key. Otherwise a plan made while the queue was nearly empty (a fresh
-- install, before autovacuum's first ANALYZE) scanned the whole lane-head
-- index for every completion, and a prepared statement keeps its plan:
-- measured, delivery fell from thousands of rows a second to tens.
UPDATE mf_queue
   SET status = 'done', lease_owner = '', lease_expires_at = NULL, updated_at = now()
 WHERE id = $1 AND (status = 'inflight' AND lease_owner = $2 AND attempts = $3) IS TRUE
