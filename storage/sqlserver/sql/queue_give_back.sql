-- Gives back a claimed row that was never sent (storage.Store.QueueGiveBack):
-- pending again, in place, as if the claim had not been made, its attempt
-- taken back, so that rows a lane claimed ahead of a failing head do not
-- run out of attempts they never made. Only the claim that is still current
-- (same owner, same attempt, in flight) may. The row is addressed by id, so
-- it is locked before any index key. @error and @detail, when @error is not
-- empty, say why its send wrote nothing (the destination unreachable), kept
-- as its last error for GET /lanes.
SET NOCOUNT ON;
SET XACT_ABORT ON;
-- A lane's write: each lock is waited for at most 500 ms (error 1222 after),
-- in this batch only (see laneLockWait in sqlserver.go). XACT_ABORT makes
-- the timeout end the batch and the transaction: without it, SQL Server
-- cancels only the statement that waited and runs the rest of the batch.
SET LOCK_TIMEOUT 500;
UPDATE mf_queue
   SET status = N'pending', lease_owner = N'', lease_expires_at = NULL,
       attempts = attempts - 1, updated_at = SYSUTCDATETIME(),
       last_error = CASE WHEN DATALENGTH(@error) = 0 THEN last_error ELSE @error END,
       last_error_detail = CASE WHEN DATALENGTH(@error) = 0 THEN last_error_detail ELSE @detail END
 WHERE id = @id AND status = N'inflight' AND lease_owner = @owner AND attempts = @attempt;
SELECT @@ROWCOUNT AS updated;
