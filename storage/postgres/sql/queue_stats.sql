-- Unfinished and dead rows only: done rows grow without bound until purged
-- and are not worth a scan per metrics scrape. The two branches read only
-- the partial indexes mf_queue_lane_head and mf_queue_dead: one IN list of
-- the three statuses is implied by neither index's predicate, and was a
-- scan of the whole table at every scrape (TestQueueStatsReadsNoDoneRows).
-- held: the blocked lanes (a held row is always its lane's head).
SELECT destination, status, count(*), count(*) FILTER (WHERE held)
  FROM (SELECT destination, status, held
          FROM mf_queue
         WHERE status IN ('pending', 'inflight')
        UNION ALL
        SELECT destination, status, held
          FROM mf_queue
         WHERE status = 'dead') AS q
 GROUP BY destination, status
 ORDER BY destination, status
