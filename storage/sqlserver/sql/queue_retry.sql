-- Back to pending in place (same id: still the lane head), due after the delay.
-- One clock value for both times, so next_attempt_at - updated_at is the delay,
-- read once the row is locked (UPDLOCK, held to commit), as in
-- queue_extend_lease.sql: a clock read before a wait for the row's lock
-- made the retry due sooner than its delay by that wait.
SET NOCOUNT ON;
SET XACT_ABORT ON;
-- A lane's write: each lock is waited for at most 500 ms (error 1222 after),
-- in this batch only (see laneLockWait in sqlserver.go). XACT_ABORT makes
-- the timeout end the batch and the transaction: without it, SQL Server
-- cancels only the statement that waited and runs the rest of the batch.
SET LOCK_TIMEOUT 500;
DECLARE @locked BIGINT;
SELECT @locked = id FROM mf_queue WITH (UPDLOCK, ROWLOCK) WHERE id = @id;
DECLARE @now DATETIME2(6) = SYSUTCDATETIME();
UPDATE mf_queue
   SET status = N'pending', lease_owner = N'', lease_expires_at = NULL,
       next_attempt_at = DATEADD(microsecond, @delay_us, DATEADD(second, @delay_s, @now)),
       last_error = @error, last_error_detail = @detail, updated_at = @now
 WHERE id = @id AND status = N'inflight' AND lease_owner = @owner AND attempts = @attempt;
SELECT @@ROWCOUNT AS updated;
