-- Only finished rows, only older than the cut-off, at most @limit at a time,
-- oldest first. Returns how many it deleted.
--
-- Deleted in chunks of at most 500 rows per statement, all in the one
-- transaction: SQL Server escalates a statement that takes about 5,000 locks
-- on one table to a table lock, which would stop every lane's claims and
-- every ingest until the purge commits. Finished rows are never written
-- again, so the only locks a purge meets are readers'.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @cutoff DATETIME2(6) =
    DATEADD(microsecond, -@older_us, DATEADD(second, -@older_s, CAST(SYSUTCDATETIME() AS DATETIME2(6))));
DECLARE @deleted BIGINT = 0, @chunk INT, @n INT;

WHILE @deleted < @limit
BEGIN
    SET @chunk = CASE WHEN @limit - @deleted < 500 THEN @limit - @deleted ELSE 500 END;
    WITH doomed AS (
        SELECT TOP (@chunk) id
          FROM mf_queue
         WHERE status IN (N'done', N'dead') AND updated_at < @cutoff
         ORDER BY updated_at
    )
    DELETE FROM doomed;
    SET @n = @@ROWCOUNT;
    SET @deleted += @n;
    IF @n < @chunk
        BREAK;
END;

SELECT @deleted AS deleted;
