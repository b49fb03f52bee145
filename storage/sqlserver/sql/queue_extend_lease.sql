SET NOCOUNT ON;
DECLARE @now DATETIME2(6) = SYSUTCDATETIME();
UPDATE mf_queue
   SET lease_expires_at = DATEADD(microsecond, @ttl_us, DATEADD(second, @ttl_s, @now)),
       updated_at = @now
 WHERE id = @id AND status = N'inflight' AND lease_owner = @owner AND attempts = @attempt;
SELECT @@ROWCOUNT AS updated;
