-- Operator skip: the lane's head, when it is pending, is set aside and its
-- lane moves on. Only the head: a row with a lower id of the same lane still
-- pending or in flight refuses the skip (storage.NotHead; the look is
-- queue_skip_refused.sql), so that a mistyped id cannot drop a message
-- queued behind a healthy head.
--
-- The head check is read first, without keeping locks, and the UPDATE then
-- takes the row by id only if nothing was ahead: find first, lock second, as
-- in queue_claim_next.sql (WHY FIND FIRST, LOCK SECOND). One UPDATE with the
-- check as a subquery would lock this row and then read the index keys of
-- the rows ahead: a lane's advance that completes the head (its row, then
-- its mf_queue_lane_head key) and claims this row next would deadlock with it.
-- Reading first leaves no race: the read sees only committed rows (a
-- snapshot with READ_COMMITTED_SNAPSHOT ON, committed rows otherwise), ids
-- only grow and become visible in id order (queue_claim_next.sql (b)), and a
-- finished row never comes back, so once no row is ahead of this one none
-- ever will be: the check cannot go stale in the direction that would skip a
-- row behind the head. The status is checked by the UPDATE itself, under its
-- lock. The head is read through mf_queue_lane_head, its filter repeated
-- word for word; DATALENGTH as in queue_claim_next.sql (lanes "123" and
-- "123 " are two).
SET NOCOUNT ON;
-- The row's message and destination come back for the operator's audit
-- line (storage.QueueActed), read into variables by the UPDATE itself.
DECLARE @lane NVARCHAR(800), @ahead BIGINT, @message_id BIGINT, @destination NVARCHAR(450);
SELECT @lane = lane FROM mf_queue WHERE id = @id;
SELECT TOP (1) @ahead = id
  FROM mf_queue WITH (INDEX(mf_queue_lane_head))
 WHERE lane = @lane AND DATALENGTH(lane) = DATALENGTH(@lane) AND status IN (N'pending', N'inflight') AND id < @id
 ORDER BY id;
UPDATE mf_queue
   SET status = N'dead', held = 0, last_error = @reason, last_error_detail = N'', updated_at = SYSUTCDATETIME(),
       @message_id = message_id, @destination = destination
 WHERE id = @id AND status = N'pending' AND @ahead IS NULL;
SELECT @@ROWCOUNT AS updated, @message_id AS message_id, @destination AS destination;
