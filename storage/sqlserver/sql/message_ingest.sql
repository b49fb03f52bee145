-- A whole ingest batch: every message, then every queue row, one statement
-- each. @messages (mf_ingest_message) and @deliveries (mf_ingest_delivery) are
-- table-valued parameters, so the batch is one round trip whatever its size.
-- It runs in the fenced transaction, after fence.sql.
--
-- Result: one row per generated id, kind 0 for messages and 1 for queue rows,
-- each kind in id order. Ids follow the batch order because SQL Server
-- assigns IDENTITY values in the order of an INSERT ... SELECT's ORDER BY
-- (documented for INSERT); so the i-th message id belongs to the i-th
-- message, and the queue ids follow the messages and, within a message, its
-- deliveries.
--
-- XACT_ABORT: any error (a CHECK violation on a status, a value too long)
-- stops the batch and rolls back the whole transaction: the batch commits
-- whole or not at all.
SET NOCOUNT ON;
SET XACT_ABORT ON;

-- Ingest transactions take ids and commit one at a time, so a later queue id
-- never becomes visible before an earlier one (a lane claim could otherwise
-- deliver id 11 while id 10 is still uncommitted). The lock is taken here,
-- after the fence and before the first id is generated, and held until commit
-- (LockOwner Transaction). Taking it in this batch rather than in a statement
-- of its own keeps one round trip out of the serialised section.
--
-- Its name has the login's default schema (SCHEMA_NAME()), where mf's
-- unqualified tables resolve (application locks are per database), so that
-- stores in two schemas of one database do not serialise each other's
-- ingests. An mf before this one took N'mf_ingest' exclusive, whatever the
-- schema: that name is taken shared first, so that a node of the older mf
-- (a rolling upgrade) and this one still exclude each other, and two
-- schemas' nodes of this mf do not. Once no older mf can run on the
-- database, the shared lock can go. message_resend.sql and
-- queue_resend_dead.sql take the same two locks, in this order.
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
DECLARE @message_ids TABLE (id BIGINT NOT NULL PRIMARY KEY);
DECLARE @queue_ids TABLE (id BIGINT NOT NULL PRIMARY KEY);

INSERT INTO mf_messages (inbound, received_at, control_id, message_type, payload, status, error)
OUTPUT inserted.id INTO @message_ids (id)
SELECT inbound, @now, control_id, message_type, payload, status, error
  FROM @messages
 ORDER BY ord;

-- The n-th smallest new message id is message ord n (see above).
INSERT INTO mf_queue (message_id, destination, lane, status, attempts, next_attempt_at,
                      lease_owner, last_error, created_at, updated_at)
OUTPUT inserted.id INTO @queue_ids (id)
SELECT m.id, d.destination, d.lane, N'pending', 0, @now, N'', N'', @now, @now
  FROM @deliveries AS d
  JOIN (SELECT id, ROW_NUMBER() OVER (ORDER BY id) AS ord FROM @message_ids) AS m
    ON m.ord = d.message_ord
 ORDER BY d.message_ord, d.ord;

-- An INSTEAD OF trigger of an operator's that skips a row does not show in
-- OUTPUT, which returns every row as if it had been inserted (documented
-- for INSTEAD OF triggers): the count the Go code checks would match, and
-- a message answered AA with nothing stored. So every id returned must be
-- a row now, or the batch fails whole (XACT_ABORT), refused by the dialect
-- (51207, as for a value the database refuses: the message is answered AR).
IF EXISTS (SELECT 1 FROM @message_ids AS i WHERE NOT EXISTS (SELECT 1 FROM mf_messages AS m WHERE m.id = i.id))
   OR EXISTS (SELECT 1 FROM @queue_ids AS i WHERE NOT EXISTS (SELECT 1 FROM mf_queue AS q WHERE q.id = i.id))
BEGIN
    THROW 51207, N'mf: a trigger skipped a row of the batch, in mf_messages or mf_queue', 1;
END;

SELECT CAST(0 AS INT) AS kind, id FROM @message_ids
UNION ALL
SELECT CAST(1 AS INT), id FROM @queue_ids
ORDER BY kind, id;
