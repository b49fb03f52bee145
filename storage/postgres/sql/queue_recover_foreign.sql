-- Promotion recovery: owner-scoped and lease-blind. Every row in flight under
-- another owner is re-pended at once, live lease or not: the fence guarantees
-- that owner is no longer acting (its term is over), so waiting out the
-- lease would only delay failover. Rows of this owner are left alone.
--
-- A row in flight above its lane's lowest unfinished row was claimed ahead
-- and never sent (a lane sends row n+1 only once row n is done or dead:
-- the FIFO argument, (a), in queue_claim_next.sql), so its attempt is
-- taken back, as a give-back takes it back (queue_give_back.sql): counted,
-- every failover used up an attempt of each row claimed ahead, and
-- max_attempts held or set them aside one real attempt early. The lowest
-- may have been sent, and keeps its attempt. The old owner's claims are
-- told from the new one's by their owner. (The recurring sweep,
-- queue_reclaim_expired.sql, keeps the attempts: its rows may be this
-- owner's, whose claims are told apart by their attempt.)
UPDATE mf_queue AS q
   SET status = 'pending', lease_owner = '', lease_expires_at = NULL, updated_at = now(),
       attempts = q.attempts - CASE WHEN q.id > (SELECT min(h.id)
                                                  FROM mf_queue AS h
                                                 WHERE h.lane = q.lane AND h.status IN ('pending', 'inflight'))
                                    THEN 1 ELSE 0 END
 WHERE q.status = 'inflight' AND q.lease_owner <> $1
