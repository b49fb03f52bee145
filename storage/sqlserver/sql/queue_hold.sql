-- Park the claimed head: pending (still the lane head, so the lane waits)
-- and held (so no claim takes it) until an operator acts.
SET NOCOUNT ON;
UPDATE mf_queue
   SET status = N'pending', held = 1, lease_owner = N'', lease_expires_at = NULL,
       last_error = @error, last_error_detail = @detail, updated_at = SYSUTCDATETIME()
 WHERE id = @id AND status = N'inflight' AND lease_owner = @owner AND attempts = @attempt;
SELECT @@ROWCOUNT AS updated;
