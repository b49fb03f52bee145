-- The fence (migration 0012). It reads mf_leader_term, the copy of the
-- lease's owner and term that only an election writes (a trigger on
-- mf_leader_lease moves it in the election's transaction), not the lease row
-- that the renewal and the resignation update. HOLDLOCK keeps the shared
-- lock on that row until the surrounding transaction ends (a plain READ
-- COMMITTED read would drop it at once), so an election, whose copy needs an
-- exclusive lock on the row, waits for every fenced write in progress, and a
-- fence check after the election took the row waits for its commit and then
-- finds the new term: the writes of term T are ordered entirely before term
-- T+1 begins. A renewal or a resignation locks the lease row only, and waits
-- for no fenced write, whatever that write waits on. Shared locks do not
-- block each other, so concurrent fenced writers of the same term do not
-- serialise here. ROWLOCK keeps the lock on this one key.
--
-- HOLDLOCK is SERIALIZABLE for this table: a locking read of the latest
-- committed row, never a row version, so the check is the same whether or not
-- READ_COMMITTED_SNAPSHOT is ON.
SELECT 1
  FROM mf_leader_term WITH (HOLDLOCK, ROWLOCK)
 WHERE name = N'leader' AND owner = @owner AND term = @term;
