-- Operator retry: unheld and due now, with a fresh set of attempts (see
-- storage/postgres/sql/queue_release.sql). Only a pending row: one in flight
-- is being delivered, one finished has nothing left to retry.
SET NOCOUNT ON;
DECLARE @now DATETIME2(6) = SYSUTCDATETIME();
UPDATE mf_queue
   SET held = 0, next_attempt_at = @now, attempts_at_retry = attempts, updated_at = @now
 WHERE id = @id AND status = N'pending';
SELECT @@ROWCOUNT AS updated;
