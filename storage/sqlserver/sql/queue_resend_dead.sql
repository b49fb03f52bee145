-- One transaction of an operator's resend-dead
-- (storage.Store.QueueResendDead; see
-- storage/postgres/sql/queue_resend_dead_pick.sql): destination
-- @destination's dead rows not resent yet (resent_as), in id order, after id
-- @after and, when @before is not 0, before id @before (the call's first new
-- row), set aside (updated_at) in [@since, @until) (N'': no bound), at most
-- @limit, each get a new pending row of their message in their lane, given
-- ids in their order (ORDER BY), under the ingest lock as in
-- message_resend.sql, so that each is the newest of its lane and a later
-- queue id never becomes visible before an earlier one (the lane claim's
-- FIFO argument, (b)); each dead row is marked resent as its new row (it
-- stays dead, its updated_at too). Not fenced: an operator acts through any
-- node's API.
--
-- The dead rows are locked (UPDLOCK, HOLDLOCK) until commit: the purge
-- cannot delete them, nor so their messages, meanwhile, and a second
-- resend-dead waits and then finds them resent. @since and @until come as
-- text, as in message_search.sql. Returns each dead row's id and its new
-- row's, in id order; none when there was no dead row left to resend.
SET NOCOUNT ON;
SET XACT_ABORT ON;

DECLARE @lock INT;
EXEC @lock = sp_getapplock
    @Resource = N'mf_ingest',
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
DECLARE @from DATETIME2(6) = CASE WHEN @since = N'' THEN NULL ELSE CONVERT(DATETIME2(6), @since, 126) END;
DECLARE @to DATETIME2(6) = CASE WHEN @until = N'' THEN NULL ELSE CONVERT(DATETIME2(6), @until, 126) END;
DECLARE @dead TABLE (
    ord        INT IDENTITY (1, 1) NOT NULL PRIMARY KEY,
    id         BIGINT NOT NULL,
    message_id BIGINT NOT NULL,
    lane       NVARCHAR(800) COLLATE Latin1_General_100_BIN2 NOT NULL
);
DECLARE @queue_ids TABLE (id BIGINT NOT NULL PRIMARY KEY);

-- IDENTITY values follow the ORDER BY of an INSERT ... SELECT: ord is the
-- dead rows' id order.
INSERT INTO @dead (id, message_id, lane)
SELECT TOP (@limit) q.id, q.message_id, q.lane
  FROM mf_queue AS q WITH (UPDLOCK, HOLDLOCK)
 WHERE q.destination = @destination AND DATALENGTH(q.destination) = DATALENGTH(@destination)
   AND q.status = N'dead' AND q.resent_as IS NULL
   AND q.id > @after AND (@before = 0 OR q.id < @before)
   AND (@from IS NULL OR q.updated_at >= @from)
   AND (@to IS NULL OR q.updated_at < @to)
 ORDER BY q.id;

INSERT INTO mf_queue (message_id, destination, lane, status, attempts, next_attempt_at,
                      lease_owner, last_error, created_at, updated_at)
OUTPUT inserted.id INTO @queue_ids (id)
SELECT d.message_id, @destination, d.lane, N'pending', 0, @now, N'', N'', @now, @now
  FROM @dead AS d
 ORDER BY d.ord;

-- The n-th new id (in id order) is the n-th dead row's.
WITH fresh AS (SELECT id, ROW_NUMBER() OVER (ORDER BY id) AS ord FROM @queue_ids)
UPDATE q
   SET resent_as = f.id
  FROM mf_queue AS q
  JOIN @dead AS d ON d.id = q.id
  JOIN fresh AS f ON f.ord = d.ord;

WITH fresh AS (SELECT id, ROW_NUMBER() OVER (ORDER BY id) AS ord FROM @queue_ids)
SELECT d.id, f.id
  FROM @dead AS d
  JOIN fresh AS f ON f.ord = d.ord
 ORDER BY d.ord;
