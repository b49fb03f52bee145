-- Only finished rows, only older than the cut-off, at most @limit at a time,
-- oldest first; then the messages those rows leave with no queue row, past
-- the cut-off. Returns how many of each it deleted.
--
-- Deleted in chunks of at most 500 rows per statement: SQL Server escalates
-- a statement that takes about 5,000 locks on one table to a table lock,
-- which would stop every lane's claims and every ingest until the purge
-- commits. Finished rows are never written again, so the only locks a purge
-- meets are readers'.
--
-- The messages are those of the deleted rows (OUTPUT), looked up by id: a
-- walk of mf_messages past the cut-off for those with no queue row went
-- over every message whose rows were not all finished (a destination
-- blocked for weeks: all its backlog), at every call; message_purge_walk.sql
-- finds those that never had a row. READCOMMITTEDLOCK: with
-- READ_COMMITTED_SNAPSHOT ON, a plain NOT EXISTS would read mf_queue as of
-- the statement's start and could miss the row a resend added while this
-- statement waited for the message row's lock; the locking read sees it.
-- (The foreign key would refuse the delete anyway, but as an error, not as
-- a skipped row.)
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @cutoff DATETIME2(6) =
    DATEADD(microsecond, -@older_us, DATEADD(second, -@older_s, CAST(SYSUTCDATETIME() AS DATETIME2(6))));
DECLARE @deleted BIGINT = 0, @messages BIGINT = 0, @chunk INT, @n INT;
DECLARE @freed TABLE (id BIGINT NOT NULL);

WHILE @deleted < @limit
BEGIN
    SET @chunk = CASE WHEN @limit - @deleted < 500 THEN @limit - @deleted ELSE 500 END;
    WITH doomed AS (
        SELECT TOP (@chunk) id, message_id
          FROM mf_queue
         WHERE status IN (N'done', N'dead') AND updated_at < @cutoff
         ORDER BY updated_at
    )
    DELETE FROM doomed
    OUTPUT deleted.message_id INTO @freed (id);
    SET @n = @@ROWCOUNT;
    SET @deleted += @n;
    IF @n < @chunk
        BREAK;
END;

WHILE 1 = 1
BEGIN
    WITH doomed AS (
        SELECT TOP (500) m.id
          FROM mf_messages AS m
         WHERE m.id IN (SELECT f.id FROM @freed AS f)
           AND m.received_at < @cutoff
           AND NOT EXISTS (SELECT 1 FROM mf_queue AS q WITH (READCOMMITTEDLOCK) WHERE q.message_id = m.id)
    )
    DELETE FROM doomed;
    SET @n = @@ROWCOUNT;
    SET @messages += @n;
    IF @n < 500
        BREAK;
END;

SELECT @deleted AS queue_rows, @messages AS messages;
