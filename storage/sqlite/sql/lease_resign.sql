-- Expire the lease now (never extend it), only for the exact owner and term.
-- SQLite has no NOTIFY: a single node has no follower to wake.
UPDATE mf_leader_lease
   SET expires_at = min(expires_at, CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
 WHERE name = 'leader' AND owner = ?1 AND term = ?2
