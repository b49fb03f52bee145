-- The claim's row is locked first (UPDLOCK, held to commit), and only then
-- is the clock read: an UPDATE that waited for the row's lock after @now
-- was read made a lease shorter by the wait, expired already after a wait
-- longer than the TTL, and the sweep re-pended the row being sent (a
-- duplicate; see THE LEASE in queue_claim_next.sql). Locking by id takes
-- the row before any index key, as every writer of mf_queue does.
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
   SET lease_expires_at = DATEADD(microsecond, @ttl_us, DATEADD(second, @ttl_s, @now)),
       updated_at = @now
 WHERE id = @id AND status = N'inflight' AND lease_owner = @owner AND attempts = @attempt;
SELECT @@ROWCOUNT AS updated;
