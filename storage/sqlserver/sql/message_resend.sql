-- An operator's resend (storage.Store.MessageResend): new pending queue rows
-- of message @message_id, one per row of @deliveries (mf_ingest_delivery;
-- message_ord unused), given ids in their order, under the ingest lock as in
-- message_ingest.sql: so that a later queue id never becomes visible before
-- an earlier one (the lane claim's FIFO argument, (b)). Each row is the
-- newest of its lane: it is delivered after every row queued there before
-- it. It runs in its own transaction, not fenced (an operator acts through
-- any node's API). No row inserted (no id returned) means there is no such
-- message, or its rows are purged.
--
-- First, before the ingest lock (a wait here must not hold up the ingest,
-- as on PostgreSQL, storage/postgres/sql/message_resend_lock.sql): the
-- message's finished queue rows are locked (UPDLOCK) until commit, one at a
-- time in id order, each by its primary key and looked at again under its
-- lock (a locking read sees the row as committed once the lock is granted,
-- READ_COMMITTED_SNAPSHOT on or off), as a resend-dead locks a
-- destination's dead rows (queue_resend_dead_pick.sql). The two meet there,
-- on the rows, in one order, before either takes the ingest lock: a
-- resend-dead that waited finds the row resent (resent_as) and leaves it; a
-- resend that waited queues the message again, as asked, and leaves the
-- mark the resend-dead made. Then the message's row is locked (UPDLOCK,
-- HOLDLOCK) until commit and a queue row of it looked for: the purge, which
-- deletes only a message no queue row names (message_purge_queue.sql,
-- message_purge_walk.sql), can delete neither it nor, as they are locked,
-- its finished rows meanwhile, and never deletes an unfinished row. The
-- message's unfinished rows are the lanes': not locked here.
--
-- Then the ingest lock, and under it the inserts and the marks, which wait
-- for no other session's row: the new rows are new, and only the dead rows
-- locked above are marked (by primary key, FORCESEEK). Before, the ingest
-- lock came first, and every ingest of the primary waited while this batch
-- waited for the message's row lock (without end: an operator's open
-- transaction in SSMS). A row of the message that dies (its lane sets it
-- aside) after the locks above is not marked: a later resend-dead may queue
-- the message there once more (at least once), rather than have this batch
-- wait for the lane's row under the ingest lock.
SET NOCOUNT ON;
SET XACT_ABORT ON;

DECLARE @finished TABLE (id BIGINT NOT NULL PRIMARY KEY);
DECLARE @last BIGINT = 0, @candidate BIGINT, @queued BIT = 0;

WHILE 1 = 1
BEGIN
    SET @candidate = NULL;
    SELECT TOP (1) @candidate = id
      FROM mf_queue WITH (INDEX(mf_queue_message))
     WHERE message_id = @message_id AND id > @last AND status IN (N'done', N'dead')
     ORDER BY id;
    IF @candidate IS NULL
        BREAK;
    INSERT INTO @finished (id)
    SELECT q.id
      FROM mf_queue AS q WITH (UPDLOCK, ROWLOCK, FORCESEEK)
     WHERE q.id = @candidate AND q.status IN (N'done', N'dead');
    SET @last = @candidate;
END;

SELECT @queued = 1
  FROM mf_messages AS m WITH (UPDLOCK, HOLDLOCK)
 WHERE m.id = @message_id
   AND EXISTS (SELECT 1 FROM mf_queue AS q WITH (READCOMMITTEDLOCK) WHERE q.message_id = m.id);

DECLARE @lock INT, @ingest NVARCHAR(255) = CONCAT(N'mf_ingest in ', SCHEMA_NAME());
EXEC @lock = sp_getapplock
    @Resource = N'mf_ingest',
    @LockMode = N'Shared',
    @LockOwner = N'Transaction',
    @LockTimeout = -1;
IF @lock >= 0
    EXEC @lock = sp_getapplock
        @Resource = @ingest,
        @LockMode = N'Exclusive',
        @LockOwner = N'Transaction',
        @LockTimeout = -1;
IF @lock = -3
BEGIN
    -- 51205 is retried by the dialect like a deadlock (1205).
    THROW 51205, N'mf: chosen as deadlock victim while waiting for the ingest lock', 1;
END;
IF @lock < 0
BEGIN
    THROW 51000, N'mf: the ingest lock was not granted', 1;
END;

DECLARE @now DATETIME2(6) = SYSUTCDATETIME();
DECLARE @queue_ids TABLE (id BIGINT NOT NULL PRIMARY KEY);

INSERT INTO mf_queue (message_id, destination, lane, status, attempts, next_attempt_at,
                      lease_owner, last_error, created_at, updated_at)
OUTPUT inserted.id INTO @queue_ids (id)
SELECT @message_id, d.destination, d.lane, N'pending', 0, @now, N'', N'', @now, @now
  FROM @deliveries AS d
 WHERE @queued = 1
 ORDER BY d.ord;

-- The message's dead rows of each destination resent are marked resent as
-- its new row there (see storage/postgres/sql/message_resend_mark.sql): the
-- n-th new id (in id order) is the n-th delivery's.
WITH fresh AS (SELECT id, ROW_NUMBER() OVER (ORDER BY id) AS ord FROM @queue_ids),
     sent AS (SELECT destination, ROW_NUMBER() OVER (ORDER BY ord) AS ord FROM @deliveries)
UPDATE q
   SET resent_as = f.id
  FROM mf_queue AS q WITH (FORCESEEK, ROWLOCK)
  JOIN @finished AS l ON l.id = q.id
  JOIN sent AS d ON q.destination = d.destination COLLATE Latin1_General_100_BIN2
                AND DATALENGTH(q.destination) = DATALENGTH(d.destination)
  JOIN fresh AS f ON f.ord = d.ord
 WHERE q.status = N'dead' AND q.resent_as IS NULL;

SELECT id FROM @queue_ids ORDER BY id;
