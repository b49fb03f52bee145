-- Messages past the cut-off with no queue row left (finished and purged, or
-- never routed), at most @limit at a time, oldest first, in chunks as in
-- message_purge_queue.sql. Returns how many it deleted.
--
-- READCOMMITTEDLOCK: with READ_COMMITTED_SNAPSHOT ON, a plain NOT EXISTS would
-- read mf_queue as of the statement's start and could miss the queue rows of
-- a message whose ingest committed while this statement waited for the
-- message row's lock; the locking read sees them. (The foreign key would
-- refuse the delete anyway, but as an error, not as a skipped row.)
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @cutoff DATETIME2(6) =
    DATEADD(microsecond, -@older_us, DATEADD(second, -@older_s, CAST(SYSUTCDATETIME() AS DATETIME2(6))));
DECLARE @deleted BIGINT = 0, @chunk INT, @n INT;

WHILE @deleted < @limit
BEGIN
    SET @chunk = CASE WHEN @limit - @deleted < 500 THEN @limit - @deleted ELSE 500 END;
    WITH doomed AS (
        SELECT TOP (@chunk) m.id
          FROM mf_messages AS m
         WHERE m.received_at < @cutoff
           AND NOT EXISTS (SELECT 1 FROM mf_queue AS q WITH (READCOMMITTEDLOCK) WHERE q.message_id = m.id)
         ORDER BY m.received_at
    )
    DELETE FROM doomed;
    SET @n = @@ROWCOUNT;
    SET @deleted += @n;
    IF @n < @chunk
        BREAK;
END;

SELECT @deleted AS deleted;
