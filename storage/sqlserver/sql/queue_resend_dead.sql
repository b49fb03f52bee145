-- Second batch of a transaction of an operator's resend-dead
-- (storage.Store.QueueResendDead), after queue_resend_dead_pick.sql, which
-- locked the dead rows (and took no other lock than those): each row of
-- @dead (mf_resend_dead: a dead row, its message and the lane the routes in
-- force give it now) gets a new pending row of its message in that lane,
-- given ids in @dead's order (ORDER BY), under the ingest lock, taken here
-- as in message_ingest.sql and message_resend.sql and held to commit, so
-- that each is the newest of its lane and a later queue id never becomes
-- visible before an earlier one (the lane claim's FIFO argument, (b)); each
-- dead row is marked resent as its new row (it stays dead, its updated_at
-- too). Returns each dead row's id and its new row's, in @dead's order.
--
-- Under the ingest lock this batch waits for no other session's row: it adds
-- rows, and marks only the rows the pick locked (by primary key,
-- FORCESEEK: a scan would take update locks on other rows, the lanes'
-- among them, and wait for them while every ingest waits). The lock is
-- taken here, in the insert's batch, and not by the pick (see
-- queue_resend_dead_pick.sql): nothing waits for the ingest lock while the
-- rows' locks are waited for, the payloads travel and the lanes are
-- computed.
SET NOCOUNT ON;
SET XACT_ABORT ON;

DECLARE @lock INT, @ingest NVARCHAR(255) = CONCAT(N'mf_ingest in ', SCHEMA_NAME());
EXEC @lock = sp_getapplock
    @Resource = N'mf_ingest',
    @LockMode = N'Shared',
    @LockOwner = N'Transaction',
    @LockTimeout = -1;
IF @lock >= 0
    EXEC @lock = sp_getapplock
        @Resource = @ingest,
        @LockMode = N'Exclusive',
        @LockOwner = N'Transaction',
        @LockTimeout = -1;
IF @lock = -3
BEGIN
    -- 51205 is retried by the dialect like a deadlock (1205).
    THROW 51205, N'mf: chosen as deadlock victim while waiting for the ingest lock', 1;
END;
IF @lock < 0
BEGIN
    THROW 51000, N'mf: the ingest lock was not granted', 1;
END;

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
  FROM mf_queue AS q WITH (FORCESEEK, ROWLOCK)
  JOIN dead AS d ON d.id = q.id
  JOIN fresh AS f ON f.ord = d.ord;

WITH fresh AS (SELECT id, ROW_NUMBER() OVER (ORDER BY id) AS ord FROM @queue_ids),
     dead AS (SELECT id, ROW_NUMBER() OVER (ORDER BY ord) AS ord FROM @dead)
SELECT d.id, f.id
  FROM dead AS d
  JOIN fresh AS f ON f.ord = d.ord
 ORDER BY d.ord;
