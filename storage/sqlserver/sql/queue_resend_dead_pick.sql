-- First batch of a transaction of an operator's resend-dead
-- (storage.Store.QueueResendDead; see
-- storage/postgres/sql/queue_resend_dead_pick.sql): under the ingest lock
-- (taken first, as in message_resend.sql, so that the two take their locks
-- in one order), destination @destination's dead rows not resent yet
-- (resent_as), in id order, after id @after and, when @before is not 0,
-- before id @before (the call's first new row), set aside (updated_at) in
-- [@since, @until) (N'': no bound), at most @limit, each with its message's
-- inbound and payload, from which the Go code computes the lane of its new
-- row by the routes in force; queue_resend_dead.sql, in the same
-- transaction, inserts them. Not fenced: an operator acts through any
-- node's API.
--
-- The dead rows are locked (UPDLOCK, HOLDLOCK) until commit: the purge
-- cannot delete them, nor so their messages, meanwhile, and a second
-- resend-dead waits and then finds them resent. @since and @until come as
-- text, as in message_search.sql. A dead row whose message is gone (none
-- should be: the purge deletes a message only once no row names it) is not
-- found.
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

DECLARE @from DATETIME2(6) = CASE WHEN @since = N'' THEN NULL ELSE CONVERT(DATETIME2(6), @since, 126) END;
DECLARE @to DATETIME2(6) = CASE WHEN @until = N'' THEN NULL ELSE CONVERT(DATETIME2(6), @until, 126) END;

SELECT TOP (@limit) q.id, q.message_id, q.lane, m.inbound, m.payload
  FROM mf_queue AS q WITH (UPDLOCK, HOLDLOCK)
  JOIN mf_messages AS m ON m.id = q.message_id
 WHERE q.destination = @destination AND DATALENGTH(q.destination) = DATALENGTH(@destination)
   AND q.status = N'dead' AND q.resent_as IS NULL
   AND q.id > @after AND (@before = 0 OR q.id < @before)
   AND (@from IS NULL OR q.updated_at >= @from)
   AND (@to IS NULL OR q.updated_at < @to)
 ORDER BY q.id;
