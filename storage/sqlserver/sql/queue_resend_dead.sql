-- Second batch of a transaction of an operator's resend-dead
-- (storage.Store.QueueResendDead), after queue_resend_dead_pick.sql, which
-- took the ingest lock and locked the dead rows: each row of @dead
-- (mf_resend_dead: a dead row, its message and the lane the routes in force
-- give it now) gets a new pending row of its message in that lane, given
-- ids in @dead's order (ORDER BY), under the ingest lock as in
-- message_resend.sql, so that each is the newest of its lane and a later
-- queue id never becomes visible before an earlier one (the lane claim's
-- FIFO argument, (b)); each dead row is marked resent as its new row (it
-- stays dead, its updated_at too). Returns each dead row's id and its new
-- row's, in @dead's order.
SET NOCOUNT ON;
SET XACT_ABORT ON;

DECLARE @now DATETIME2(6) = SYSUTCDATETIME();
DECLARE @queue_ids TABLE (id BIGINT NOT NULL PRIMARY KEY);

INSERT INTO mf_queue (message_id, destination, lane, status, attempts, next_attempt_at,
                      lease_owner, last_error, created_at, updated_at)
OUTPUT inserted.id INTO @queue_ids (id)
SELECT d.message_id, @destination, d.lane, N'pending', 0, @now, N'', N'', @now, @now
  FROM @dead AS d
 ORDER BY d.ord;

-- The n-th new id (in id order) is the n-th dead row's.
WITH fresh AS (SELECT id, ROW_NUMBER() OVER (ORDER BY id) AS ord FROM @queue_ids),
     dead AS (SELECT id, ROW_NUMBER() OVER (ORDER BY ord) AS ord FROM @dead)
UPDATE q
   SET resent_as = f.id
  FROM mf_queue AS q
  JOIN dead AS d ON d.id = q.id
  JOIN fresh AS f ON f.ord = d.ord;

WITH fresh AS (SELECT id, ROW_NUMBER() OVER (ORDER BY id) AS ord FROM @queue_ids),
     dead AS (SELECT id, ROW_NUMBER() OVER (ORDER BY ord) AS ord FROM @dead)
SELECT d.id, f.id
  FROM dead AS d
  JOIN fresh AS f ON f.ord = d.ord
 ORDER BY d.ord;
