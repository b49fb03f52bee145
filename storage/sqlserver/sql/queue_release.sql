-- Operator retry: unheld and due now, with a fresh set of attempts (see
-- storage/postgres/sql/queue_release.sql). Only a pending row: one in flight
-- is being delivered, one finished has nothing left to retry.
-- The row's message and destination come back for the operator's audit
-- line (storage.QueueActed), read into variables by the UPDATE itself.
SET NOCOUNT ON;
DECLARE @now DATETIME2(6) = SYSUTCDATETIME(), @message_id BIGINT, @destination NVARCHAR(450);
UPDATE mf_queue
   SET held = 0, next_attempt_at = @now, attempts_at_retry = attempts, updated_at = @now,
       @message_id = message_id, @destination = destination
 WHERE id = @id AND status = N'pending';
SELECT @@ROWCOUNT AS updated, @message_id AS message_id, @destination AS destination;
