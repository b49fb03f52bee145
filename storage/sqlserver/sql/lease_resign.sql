-- Expire the lease now, if it is still this owner's and term's. SQL Server has
-- no NOTIFY: followers notice at their next election attempt (every heartbeat,
-- or sooner when the lease they last saw was due to expire).
SET NOCOUNT ON;
DECLARE @now DATETIME2(6) = SYSUTCDATETIME();
UPDATE mf_leader_lease
   SET expires_at = CASE WHEN expires_at < @now THEN expires_at ELSE @now END
 WHERE name = N'leader' AND owner = @owner AND term = @term;
SELECT @@ROWCOUNT AS resigned;
