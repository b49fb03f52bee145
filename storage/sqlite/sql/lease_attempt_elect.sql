-- Elect only on an expired (or resigned) lease: never preempt, not even the
-- same owner. The term grows by one at every acquisition. No row comes back
-- when nothing was elected; the caller then reads the lease as it stands
-- (lease_read.sql) in the same transaction, so that a follower learns how
-- long the live lease has left.
-- ?1 owner, ?2 TTL in milliseconds.
UPDATE mf_leader_lease
   SET owner = ?1,
       term = term + 1,
       acquired_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
       expires_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER) + ?2
 WHERE name = 'leader' AND expires_at <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
RETURNING owner, term, acquired_at, expires_at, CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
