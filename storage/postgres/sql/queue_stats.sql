-- Unfinished and dead rows only: done rows grow without bound until purged
-- and are not worth a scan per metrics scrape. The two branches read only
-- the partial indexes mf_queue_lane_head and mf_queue_dead: one IN list of
-- the three statuses is implied by neither index's predicate, and was a
-- scan of the whole table at every scrape (TestQueueStatsReadsNoDoneRows).
-- held: the blocked lanes (a held row is always its lane's head). The dead
-- branch names no column but destination (a dead row is never held), so
-- that it can read mf_queue_dead alone, not the heap of every dead row
-- kept for retention_days, at every scrape of every node.
-- The last column is the age of the oldest unfinished row, in seconds on the
-- database's clock (0 for dead rows): read from the rows already visited.
SELECT destination, status, count(*), count(*) FILTER (WHERE held),
       COALESCE(EXTRACT(EPOCH FROM now() - min(created_at))::float8, 0)
  FROM (SELECT destination, status, held, created_at
          FROM mf_queue
         WHERE status IN ('pending', 'inflight')
        UNION ALL
        SELECT destination, 'dead', false, NULL
          FROM mf_queue
         WHERE status = 'dead') AS q
 GROUP BY destination, status
 ORDER BY destination, status
