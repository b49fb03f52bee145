-- Elect only on an expired (or resigned) lease: never preempt, not even the
-- same owner. The term grows by one at every acquisition. The UPDATE reads its
-- target with an update lock (in both READ COMMITTED modes), so two nodes
-- racing here serialise on the row and the second sees the first's lease.
--
-- Nor while a single node (cluster disabled) runs on this schema: it holds
-- the schema's single-node lock (single_node_lock.sql, the same resource,
-- exclusive, owned by its session) for its life and writes with the zero
-- fence, which holds until a node is elected; elected beside it, a node
-- recovered the rows it was sending and sent them, and newer ones, while it
-- still sent its own. The lock is taken here shared, owned by the
-- transaction the Go code opens around this batch, without waiting
-- (LockTimeout 0): not granted (-1) while a single node holds it, and then
-- nothing is elected; granted (0), it keeps a single node from taking the
-- lock until the election has committed, after which the single node's
-- first write is fenced. Electors share it, and never wait for it, nor a
-- single node for them. Its return code is the last column: < 0 is not
-- granted (-1 held, -2 cancelled, -3 deadlock victim, -999 error).
--
-- One clock value, @now, is used for the new lease and returned as db_now, so
-- expires_at - db_now is exactly the TTL. When nothing was elected, the lease
-- is returned as it stands with the clock read in that same SELECT, so that a
-- follower learns how long the live lease has left.
--
-- XACT_ABORT: an error rolls the whole transaction back.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @single INT, @resource NVARCHAR(255) = CONCAT(N'mf single node ', SCHEMA_NAME());
EXEC @single = sp_getapplock
    @Resource = @resource,
    @LockMode = N'Shared',
    @LockOwner = N'Transaction',
    @LockTimeout = 0;

DECLARE @now DATETIME2(6) = SYSUTCDATETIME();
-- owner has the column's collation: UNION ALL refuses to combine two
-- different column collations (the table variable's would be the database's).
DECLARE @elected TABLE (
    owner       NVARCHAR(450) COLLATE Latin1_General_100_BIN2 NOT NULL,
    term        BIGINT        NOT NULL,
    acquired_at DATETIME2(6)  NOT NULL,
    expires_at  DATETIME2(6)  NOT NULL
);

IF @single >= 0
BEGIN
    UPDATE mf_leader_lease
       SET owner = @owner,
           term = term + 1,
           acquired_at = @now,
           expires_at = DATEADD(microsecond, @ttl_us, DATEADD(second, @ttl_s, @now))
    OUTPUT inserted.owner, inserted.term, inserted.acquired_at, inserted.expires_at
      INTO @elected (owner, term, acquired_at, expires_at)
     WHERE name = N'leader' AND expires_at <= @now;
END;

SELECT owner, term, acquired_at, expires_at, @now AS db_now, CAST(1 AS BIT) AS elected, @single AS single_node
  FROM @elected
UNION ALL
SELECT owner, term, acquired_at, expires_at, CAST(SYSUTCDATETIME() AS DATETIME2(6)), CAST(0 AS BIT), @single
  FROM mf_leader_lease
 WHERE name = N'leader' AND NOT EXISTS (SELECT 1 FROM @elected);
