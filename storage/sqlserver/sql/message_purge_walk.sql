-- The messages that never had a queue row (unrouted, rejected; and those
-- an older mf's purge left behind): a walk of mf_messages in id order from
-- where the last walk stopped, kept in mf_config as the version of
-- 'message_purge_walked' (the highest id walked past), over at most @limit
-- messages past the cut-off. It stops at the first message not past it
-- (ids are given at insert, and received_at is the insert's time). Each
-- message it passes is deleted if no queue row names it; one that has a
-- row is left to message_purge_queue.sql, which deletes it with its last
-- row. So each message is walked once in its life, and a backlog past the
-- cut-off (a destination blocked for weeks) is not walked again at every
-- call, as the walk from the oldest message past the cut-off did. Deleted
-- in statements of at most 500 rows (lock escalation: see
-- message_purge_queue.sql); READCOMMITTEDLOCK as there.
--
-- Returns the messages deleted and the messages walked past: @limit walked
-- past means there may be more to walk.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @cutoff DATETIME2(6) =
    DATEADD(microsecond, -@older_us, DATEADD(second, -@older_s, CAST(SYSUTCDATETIME() AS DATETIME2(6))));
-- Only the leader purges (fenced), one call at a time: no lock on the row.
DECLARE @walked BIGINT = ISNULL((SELECT version FROM mf_config WHERE name = N'message_purge_walked'), 0);
DECLARE @walk TABLE (id BIGINT NOT NULL PRIMARY KEY, aged BIT NOT NULL);
DECLARE @stop BIGINT, @passed BIGINT, @last BIGINT, @deleted BIGINT = 0, @n INT;

INSERT INTO @walk (id, aged)
SELECT TOP (@limit) id, CASE WHEN received_at < @cutoff THEN 1 ELSE 0 END
  FROM mf_messages
 WHERE id > @walked
 ORDER BY id;
SET @stop = (SELECT MIN(id) FROM @walk WHERE aged = 0);
IF @stop IS NOT NULL
    DELETE FROM @walk WHERE id >= @stop;
SELECT @passed = COUNT(*), @last = MAX(id) FROM @walk;

WHILE 1 = 1
BEGIN
    WITH doomed AS (
        SELECT TOP (500) m.id
          FROM mf_messages AS m
         WHERE m.id IN (SELECT w.id FROM @walk AS w)
           AND NOT EXISTS (SELECT 1 FROM mf_queue AS q WITH (READCOMMITTEDLOCK) WHERE q.message_id = m.id)
    )
    DELETE FROM doomed;
    SET @n = @@ROWCOUNT;
    SET @deleted += @n;
    IF @n < 500
        BREAK;
END;

IF @last IS NOT NULL
BEGIN
    UPDATE mf_config SET version = @last WHERE name = N'message_purge_walked';
    IF @@ROWCOUNT = 0
        INSERT INTO mf_config (name, version) VALUES (N'message_purge_walked', @last);
END;

SELECT @deleted AS deleted, @passed AS passed;
