-- Elect only on an expired (or resigned) lease: never preempt. The term grows
-- by one at every acquisition. When nothing was elected, the second branch
-- returns the lease as it stood, with the database clock, so that a follower
-- learns how long the live lease has left.
WITH elected AS (
    UPDATE mf_leader_lease
       SET owner = $1,
           term = term + 1,
           acquired_at = now(),
           expires_at = now() + make_interval(secs => $2)
     WHERE name = 'leader' AND expires_at <= now()
    RETURNING owner, term, acquired_at, expires_at
)
SELECT owner, term, acquired_at, expires_at, now(), true FROM elected
UNION ALL
SELECT owner, term, acquired_at, expires_at, now(), false
  FROM mf_leader_lease
 WHERE name = 'leader' AND NOT EXISTS (SELECT 1 FROM elected)
