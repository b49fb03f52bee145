-- Elect only on an expired (or resigned) lease: never preempt, not even the
-- same owner. The term grows by one at every acquisition. The UPDATE reads its
-- target with an update lock (in both READ COMMITTED modes), so two nodes
-- racing here serialise on the row and the second sees the first's lease.
--
-- One clock value, @now, is used for the new lease and returned as db_now, so
-- expires_at - db_now is exactly the TTL. When nothing was elected, the lease
-- is returned as it stands with the clock read in that same SELECT, so that a
-- follower learns how long the live lease has left.
SET NOCOUNT ON;
DECLARE @now DATETIME2(6) = SYSUTCDATETIME();
-- owner has the column's collation: UNION ALL refuses to combine two
-- different column collations (the table variable's would be the database's).
DECLARE @elected TABLE (
    owner       NVARCHAR(450) COLLATE Latin1_General_100_BIN2 NOT NULL,
    term        BIGINT        NOT NULL,
    acquired_at DATETIME2(6)  NOT NULL,
    expires_at  DATETIME2(6)  NOT NULL
);

UPDATE mf_leader_lease
   SET owner = @owner,
       term = term + 1,
       acquired_at = @now,
       expires_at = DATEADD(microsecond, @ttl_us, DATEADD(second, @ttl_s, @now))
OUTPUT inserted.owner, inserted.term, inserted.acquired_at, inserted.expires_at
  INTO @elected (owner, term, acquired_at, expires_at)
 WHERE name = N'leader' AND expires_at <= @now;

SELECT owner, term, acquired_at, expires_at, @now AS db_now, CAST(1 AS BIT) AS elected
  FROM @elected
UNION ALL
SELECT owner, term, acquired_at, expires_at, CAST(SYSUTCDATETIME() AS DATETIME2(6)), CAST(0 AS BIT)
  FROM mf_leader_lease
 WHERE name = N'leader' AND NOT EXISTS (SELECT 1 FROM @elected);
