-- The fence. HOLDLOCK keeps the shared lock on the lease row until the
-- surrounding transaction ends (a plain READ COMMITTED read would drop it at
-- once), so an election, a renewal or a resignation (each an UPDATE of this
-- row, which needs an exclusive lock) cannot commit between this check and
-- the writes that follow it: the writes of term T are ordered entirely before
-- term T+1 begins. Shared locks do not block each other, so concurrent fenced
-- writers of the same term do not serialise here. ROWLOCK keeps the lock on
-- this one key.
--
-- HOLDLOCK is SERIALIZABLE for this table: a locking read of the latest
-- committed row, never a row version, so the check is the same whether or not
-- READ_COMMITTED_SNAPSHOT is ON.
SELECT 1
  FROM mf_leader_lease WITH (HOLDLOCK, ROWLOCK)
 WHERE name = N'leader' AND owner = @owner AND term = @term;
