-- Expire the lease now, if it is still this owner's and term's. SQL Server has
-- no NOTIFY: followers notice at their next election attempt (every heartbeat,
-- or sooner when the lease they last saw was due to expire).
--
-- The rows are counted from OUTPUT INTO a table variable, not @@ROWCOUNT:
-- the UPDATE fires the lease's trigger (migration 0012), and an operator's
-- may be there too, and the count must be this statement's own whatever
-- they run. A bare OUTPUT is refused on a table with a trigger (error 334).
SET NOCOUNT ON;
DECLARE @now DATETIME2(6) = SYSUTCDATETIME();
DECLARE @resigned TABLE (term BIGINT NOT NULL);
UPDATE mf_leader_lease
   SET expires_at = CASE WHEN expires_at < @now THEN expires_at ELSE @now END
OUTPUT inserted.term INTO @resigned (term)
 WHERE name = N'leader' AND owner = @owner AND term = @term;
SELECT COUNT_BIG(*) AS resigned FROM @resigned;
