-- Why an operator's skip (queue_skip.sql) changed nothing: no row
-- (storage.ErrNotFound), its status if it is not pending (storage.NotPending),
-- or, pending, the head of its lane ahead of it (storage.NotHead): the lowest
-- id of the lane still pending or in flight, below the row's, through
-- mf_queue_lane_head as in queue_skip.sql. NULL when none is ahead (any more).
SET NOCOUNT ON;
DECLARE @lane NVARCHAR(800), @status NVARCHAR(16), @ahead BIGINT;
SELECT @lane = lane, @status = status FROM mf_queue WHERE id = @id;
SELECT TOP (1) @ahead = id
  FROM mf_queue WITH (INDEX(mf_queue_lane_head))
 WHERE lane = @lane AND DATALENGTH(lane) = DATALENGTH(@lane) AND status IN (N'pending', N'inflight') AND id < @id
 ORDER BY id;
SELECT @status AS status, @ahead AS ahead WHERE @status IS NOT NULL;
