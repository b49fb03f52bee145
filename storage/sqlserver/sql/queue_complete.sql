-- Only the claim that is still current may finish the row: same owner, same
-- attempt, still inflight (even if its lease expired, no one re-claimed it).
-- The row is addressed by id, so it is locked before any index key.
SET NOCOUNT ON;
SET XACT_ABORT ON;
-- A lane's write: each lock is waited for at most 500 ms (error 1222 after),
-- in this batch only (see laneLockWait in sqlserver.go). XACT_ABORT makes
-- the timeout end the batch and the transaction: without it, SQL Server
-- cancels only the statement that waited and runs the rest of the batch.
SET LOCK_TIMEOUT 500;
UPDATE mf_queue
   SET status = N'done', lease_owner = N'', lease_expires_at = NULL, updated_at = SYSUTCDATETIME()
 WHERE id = @id AND status = N'inflight' AND lease_owner = @owner AND attempts = @attempt;
SELECT @@ROWCOUNT AS updated;
