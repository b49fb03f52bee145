-- Promotion recovery: owner-scoped and lease-blind. Every row in flight under
-- another owner is re-pended at once, live lease or not: the fence guarantees
-- that owner is no longer acting (its term is over), so waiting out the
-- lease would only delay failover. Rows of this owner are left alone.
--
-- A row in flight above its lane's lowest unfinished row was claimed ahead
-- and never sent, so its attempt is taken back (see
-- storage/postgres/sql/queue_recover_foreign.sql). The subquery repeats
-- mf_queue_lane_head's WHERE term verbatim, so that SQLite reads that
-- index; the rows this statement re-pends stay in it (pending or inflight).
-- ?1 this owner.
UPDATE mf_queue
   SET status = 'pending', lease_owner = '', lease_expires_at = NULL,
       updated_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
       attempts = attempts - CASE WHEN id > (SELECT min(h.id)
                                               FROM mf_queue AS h
                                              WHERE h.lane = mf_queue.lane AND h.status IN ('pending', 'inflight'))
                                  THEN 1 ELSE 0 END
 WHERE status = 'inflight' AND lease_owner <> ?1
