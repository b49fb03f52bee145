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
-- The rows are read through mf_queue_dead_unsent (migration 0013) in id
-- order from @after: the hint keeps that plan whatever the statistics say,
-- and the filter is repeated word for word, so the filtered index always
-- matches.
--
-- The rows returned are locked (UPDLOCK) until commit: the purge cannot
-- delete them, nor so their messages, meanwhile. A second resend-dead, or a
-- resend (message_resend.sql), waits for the ingest lock, taken above and
-- held to commit, and then finds them resent. No HOLDLOCK: it kept range
-- locks on everything scanned until the operator's call committed (a lane
-- could not set a row of the destination aside meanwhile; through the
-- primary key, no row scanned could be written), and guarded nothing: a
-- row that dies meanwhile is left to the next resend-dead, as on
-- PostgreSQL. @since and @until come as text, as in
-- message_search.sql. A dead row whose message is gone (none should be: the
-- purge deletes a message only once no row names it) is not found.
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

DECLARE @from DATETIME2(6) = CASE WHEN @since = N'' THEN NULL ELSE CONVERT(DATETIME2(6), @since, 126) END;
DECLARE @to DATETIME2(6) = CASE WHEN @until = N'' THEN NULL ELSE CONVERT(DATETIME2(6), @until, 126) END;

SELECT TOP (@limit) q.id, q.message_id, q.lane, m.inbound, m.payload
  FROM mf_queue AS q WITH (UPDLOCK, INDEX(mf_queue_dead_unsent))
  JOIN mf_messages AS m ON m.id = q.message_id
 WHERE q.destination = @destination AND DATALENGTH(q.destination) = DATALENGTH(@destination)
   AND q.status = N'dead' AND q.resent_as IS NULL -- mf_queue_dead_unsent's filter
   AND q.id > @after AND (@before = 0 OR q.id < @before)
   AND (@from IS NULL OR q.updated_at >= @from)
   AND (@to IS NULL OR q.updated_at < @to)
 ORDER BY q.id;
