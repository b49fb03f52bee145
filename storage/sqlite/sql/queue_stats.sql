-- Unfinished and dead rows only: done rows grow without bound until purged
-- and are not worth a scan per metrics scrape. The two branches read only
-- the partial indexes mf_queue_lane_head and mf_queue_dead (SQLite would
-- otherwise scan the whole table for the three-status IN list).
SELECT destination, status, count(*)
  FROM (SELECT destination, status
          FROM mf_queue
         WHERE status IN ('pending', 'inflight')
        UNION ALL
        SELECT destination, 'dead' AS status
          FROM mf_queue
         WHERE status = 'dead')
 GROUP BY destination, status
 ORDER BY destination, status
