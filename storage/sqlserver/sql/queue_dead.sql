-- Set aside: no longer the lane head, so the lane moves on.
SET NOCOUNT ON;
SET XACT_ABORT ON;
-- A lane's write: each lock is waited for at most 500 ms (error 1222 after),
-- in this batch only (see laneLockWait in sqlserver.go). XACT_ABORT makes
-- the timeout end the batch and the transaction: without it, SQL Server
-- cancels only the statement that waited and runs the rest of the batch.
SET LOCK_TIMEOUT 500;
UPDATE mf_queue
   SET status = N'dead', lease_owner = N'', lease_expires_at = NULL,
       last_error = @error, last_error_detail = @detail, updated_at = SYSUTCDATETIME()
 WHERE id = @id AND status = N'inflight' AND lease_owner = @owner AND attempts = @attempt;
SELECT @@ROWCOUNT AS updated;
