-- Operator skip: the pending row is set aside and its lane moves on.
SET NOCOUNT ON;
UPDATE mf_queue
   SET status = N'dead', held = 0, last_error = @reason, last_error_detail = N'', updated_at = SYSUTCDATETIME()
 WHERE id = @id AND status = N'pending';
SELECT @@ROWCOUNT AS updated;
