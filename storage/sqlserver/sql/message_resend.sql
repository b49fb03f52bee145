-- An operator's resend (storage.Store.MessageResend): new pending queue rows
-- of message @message_id, one per row of @deliveries (mf_ingest_delivery;
-- message_ord unused), given ids in their order, under the ingest lock as in
-- message_ingest.sql: so that a later queue id never becomes visible before
-- an earlier one (the lane claim's FIFO argument, (b)). Each row is the
-- newest of its lane: it is delivered after every row queued there before
-- it. It runs in its own transaction, not fenced (an operator acts through
-- any node's API).
--
-- The message must be stored and have a queue row left: its row is locked
-- (UPDLOCK, HOLDLOCK) until commit, so the purge, which deletes only a
-- message no queue row names (message_purge_queue.sql, message_purge_walk.sql),
-- cannot delete it
-- meanwhile. No row inserted (no id returned) means there is no such
-- message, or its rows are purged.
SET NOCOUNT ON;
SET XACT_ABORT ON;

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
SELECT m.id, d.destination, d.lane, N'pending', 0, @now, N'', N'', @now, @now
  FROM @deliveries AS d
  JOIN mf_messages AS m WITH (UPDLOCK, HOLDLOCK) ON m.id = @message_id
 WHERE EXISTS (SELECT 1 FROM mf_queue AS q WITH (READCOMMITTEDLOCK) WHERE q.message_id = m.id)
 ORDER BY d.ord;

-- The message's dead rows of each destination resent are marked resent as
-- its new row there (see storage/postgres/sql/message_resend_mark.sql): the
-- n-th new id (in id order) is the n-th delivery's.
WITH fresh AS (SELECT id, ROW_NUMBER() OVER (ORDER BY id) AS ord FROM @queue_ids),
     sent AS (SELECT destination, ROW_NUMBER() OVER (ORDER BY ord) AS ord FROM @deliveries)
UPDATE q
   SET resent_as = f.id
  FROM mf_queue AS q
  JOIN sent AS d ON q.destination = d.destination COLLATE Latin1_General_100_BIN2
                AND DATALENGTH(q.destination) = DATALENGTH(d.destination)
  JOIN fresh AS f ON f.ord = d.ord
 WHERE q.message_id = @message_id AND q.status = N'dead' AND q.resent_as IS NULL;

SELECT id FROM @queue_ids ORDER BY id;
