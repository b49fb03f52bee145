-- Elect only on an expired (or resigned) lease: never preempt. The term grows
-- by one at every acquisition. When nothing was elected, the second branch
-- returns the lease as it stood, with the database clock, so that a follower
-- learns how long the live lease has left.
--
-- Nor while a single node (cluster disabled) runs on this schema: it holds
-- the schema's single-node lock (single_node_lock.sql, the same key) for its
-- life and writes with the zero fence, which holds until a node is elected;
-- elected beside it, a node recovered the rows it was sending and sent them,
-- and newer ones, while it still sent its own. The lock is taken here
-- shared, without waiting, for this statement's transaction: not granted
-- while a single node holds it (the last column is then false, and nothing
-- is elected); granted, it keeps a single node from taking the lock until
-- the election has committed, after which the single node's first write is
-- fenced. Electors share it, and never wait for it, nor a single node for
-- them. single is referenced twice and calls a volatile function, so it is
-- evaluated once; the UPDATE joins it, so that it writes nothing unless the
-- lock was granted.
WITH single AS (
    SELECT pg_try_advisory_xact_lock_shared(1835401217, hashtext(current_schema())) AS free
), elected AS (
    UPDATE mf_leader_lease
       SET owner = $1,
           term = term + 1,
           acquired_at = now(),
           expires_at = now() + make_interval(secs => $2)
      FROM single
     WHERE name = 'leader' AND expires_at <= now() AND single.free
    RETURNING owner, term, acquired_at, expires_at
)
SELECT owner, term, acquired_at, expires_at, now(), true, true FROM elected
UNION ALL
SELECT owner, term, acquired_at, expires_at, now(), false, (SELECT free FROM single)
  FROM mf_leader_lease
 WHERE name = 'leader' AND NOT EXISTS (SELECT 1 FROM elected)
