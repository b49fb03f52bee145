-- Back to pending in place (same id: still the lane head), due after the delay.
-- One clock value for both times, so next_attempt_at - updated_at is the delay.
SET NOCOUNT ON;
DECLARE @now DATETIME2(6) = SYSUTCDATETIME();
UPDATE mf_queue
   SET status = N'pending', lease_owner = N'', lease_expires_at = NULL,
       next_attempt_at = DATEADD(microsecond, @delay_us, DATEADD(second, @delay_s, @now)),
       last_error = @error, last_error_detail = @detail, updated_at = @now
 WHERE id = @id AND status = N'inflight' AND lease_owner = @owner AND attempts = @attempt;
SELECT @@ROWCOUNT AS updated;
