-- Gives back every row of a lane in flight under one owner's lease
-- (storage.Store.QueueReleaseOwn): pending again, in place, its attempt
-- taken back, exactly as queue_give_back.sql gives back one claim. The lane
-- calls it, holding no row, after a write of its that claims rows failed
-- with its outcome unknown (a reply lost after the commit): the rows that
-- write may have claimed were never sent.
--
-- Found first (through mf_queue_lane_head, its filter repeated word for word
-- as in queue_claim_next.sql, keeping no locks), then updated by id with the
-- condition checked again under the update's own lock, so that, like every
-- writer of mf_queue, it locks rows before index keys. DATALENGTH: T-SQL
-- compares strings padded with spaces (see queue_claim_next.sql).
SET NOCOUNT ON;
SET XACT_ABORT ON;
-- A lane's write: each lock is waited for at most 500 ms (error 1222 after),
-- in this batch only (see laneLockWait in sqlserver.go). XACT_ABORT makes
-- the timeout end the batch and the transaction: without it, SQL Server
-- cancels only the statement that waited and runs the rest of the batch.
SET LOCK_TIMEOUT 500;
DECLARE @now DATETIME2(6) = SYSUTCDATETIME();
DECLARE @own TABLE (id BIGINT NOT NULL PRIMARY KEY);

INSERT INTO @own (id)
SELECT id
  FROM mf_queue WITH (INDEX(mf_queue_lane_head))
 WHERE lane = @lane AND DATALENGTH(lane) = DATALENGTH(@lane) AND status IN (N'pending', N'inflight')
   AND status = N'inflight' AND lease_owner = @owner;

UPDATE q
   SET status = N'pending', lease_owner = N'', lease_expires_at = NULL,
       attempts = q.attempts - 1, updated_at = @now
  FROM mf_queue AS q
  JOIN @own AS o ON o.id = q.id
 WHERE q.status = N'inflight' AND q.lease_owner = @owner;
SELECT @@ROWCOUNT AS released;
