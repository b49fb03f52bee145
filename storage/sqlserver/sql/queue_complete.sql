-- Only the claim that is still current may finish the row: same owner, same
-- attempt, still inflight (even if its lease expired, no one re-claimed it).
-- The row is addressed by id, so it is locked before any index key.
SET NOCOUNT ON;
UPDATE mf_queue
   SET status = N'done', lease_owner = N'', lease_expires_at = NULL, updated_at = SYSUTCDATETIME()
 WHERE id = @id AND status = N'inflight' AND lease_owner = @owner AND attempts = @attempt;
SELECT @@ROWCOUNT AS updated;
