-- First batch of a transaction of an operator's resend-dead
-- (storage.Store.QueueResendDead; see
-- storage/postgres/sql/queue_resend_dead_pick.sql), before the ingest lock:
-- destination @destination's dead rows not resent yet (resent_as), in id
-- order, after id @after and, when @before is not 0, before id @before (the
-- call's first new row), set aside (updated_at) in [@since, @until) (N'': no
-- bound), at most @limit, each locked until commit and returned with its
-- message's inbound and payload, from which the Go code computes the lane of
-- its new row by the routes in force; queue_resend_dead.sql, in the same
-- transaction, takes the ingest lock and inserts them. Not fenced: an
-- operator acts through any node's API.
--
-- WHY BEFORE THE INGEST LOCK. Every ingest of the primary waits while the
-- lock is held. Taken here, it was held while this batch waited for the
-- rows' locks (without end: an operator's open transaction in SSMS on one
-- of them), while up to 1,000 payloads went to the client, while the client
-- computed their lanes and sent them back, and so for as long as the node
-- making the call stayed frozen between the two batches (SQL Server ends no
-- transaction left idle): the senders got AE meanwhile. Now the ingest lock
-- is taken only by the insert, which waits for no row lock (it adds rows
-- and marks rows locked here), as on PostgreSQL.
--
-- WHAT THE ROW LOCKS ORDER. A row is locked (UPDLOCK) by its primary key
-- only, then looked at again: a locking read sees the row as committed once
-- the lock is granted, versioned or not (READ_COMMITTED_SNAPSHOT on or
-- off), so a row another resend-dead (or a resend, message_resend.sql)
-- marked resent while this one waited is left out, and so is one the purge
-- deleted. The lock is held to commit: the purge cannot delete the row, nor
-- so its message, meanwhile (its delete waits, and its next statement sees
-- the new row). Rows are locked one at a time in id order, as
-- message_resend.sql locks a message's finished rows, so that the two
-- cannot hold a row each that the other waits for. The candidate is found
-- through mf_queue_dead_unsent (migration 0013) without keeping a lock: an
-- UPDLOCK on that index's key as well, a second resource of the same row,
-- made this wait for the row while holding the key that a resend, holding
-- the row and the ingest lock, needed for its mark (a deadlock, with every
-- ingest waiting until SQL Server's deadlock monitor ended it). The hint
-- keeps that plan whatever the statistics say, and the filter is repeated
-- word for word, so the filtered index always matches.
--
-- The rows and their messages are read back by primary key (FORCESEEK): a
-- scan would read, and under READ_COMMITTED_SNAPSHOT OFF wait for, every
-- row of the table.
--
-- A candidate found and then left out under its lock does not end the walk:
-- the loop goes on past it, so the call sees @limit rows if there are that
-- many (storage.ResendDead stops at a chunk that returns none). No
-- HOLDLOCK: it kept range locks on everything scanned until the operator's
-- call committed, and guarded nothing: a row that dies meanwhile is left to
-- the next resend-dead, as on PostgreSQL. @since and @until come as text, as
-- in message_search.sql. A dead row whose message is gone (none can be: the
-- foreign key) is not returned.
SET NOCOUNT ON;
SET XACT_ABORT ON;

DECLARE @from DATETIME2(6) = CASE WHEN @since = N'' THEN NULL ELSE CONVERT(DATETIME2(6), @since, 126) END;
DECLARE @to DATETIME2(6) = CASE WHEN @until = N'' THEN NULL ELSE CONVERT(DATETIME2(6), @until, 126) END;
DECLARE @picked TABLE (id BIGINT NOT NULL PRIMARY KEY);
DECLARE @last BIGINT = @after, @candidate BIGINT, @n BIGINT = 0;

WHILE @n < @limit
BEGIN
    SET @candidate = NULL;
    SELECT TOP (1) @candidate = q.id
      FROM mf_queue AS q WITH (INDEX(mf_queue_dead_unsent))
     WHERE q.destination = @destination AND DATALENGTH(q.destination) = DATALENGTH(@destination)
       AND q.status = N'dead' AND q.resent_as IS NULL -- mf_queue_dead_unsent's filter
       AND q.id > @last AND (@before = 0 OR q.id < @before)
       AND (@from IS NULL OR q.updated_at >= @from)
       AND (@to IS NULL OR q.updated_at < @to)
     ORDER BY q.id;
    IF @candidate IS NULL
        BREAK;

    INSERT INTO @picked (id)
    SELECT q.id
      FROM mf_queue AS q WITH (UPDLOCK, ROWLOCK, FORCESEEK)
     WHERE q.id = @candidate
       AND q.status = N'dead' AND q.resent_as IS NULL;
    SET @n += @@ROWCOUNT;
    SET @last = @candidate;
END;

SELECT q.id, q.message_id, q.lane, m.inbound, m.payload
  FROM @picked AS p
  JOIN mf_queue AS q WITH (FORCESEEK) ON q.id = p.id
  JOIN mf_messages AS m WITH (FORCESEEK) ON m.id = q.message_id
 ORDER BY q.id;
