-- Unfinished and dead rows only: done rows grow without bound until purged
-- and are not worth a scan per metrics scrape. The two branches read only
-- the partial indexes mf_queue_stats and mf_queue_dead, never a row of the
-- table (TestQueueStatsReadsIndexesOnly; SQLite would otherwise scan the
-- whole table for the three-status IN list). A dead row's held is 0: only
-- a pending head is held, a row dies from inflight (queue_dead.sql) or by
-- a skip, which clears held (queue_skip.sql).
-- held: the blocked lanes (a held row is always its lane's head).
-- The last column is the age of the oldest unfinished row, in milliseconds
-- on the database's clock (0 for dead rows).
SELECT destination, status, count(*), sum(held),
       coalesce(CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - min(created_at), 0)
  FROM (SELECT destination, status, held, created_at
          FROM mf_queue
         WHERE status IN ('pending', 'inflight')
        UNION ALL
        SELECT destination, 'dead' AS status, 0 AS held, NULL AS created_at
          FROM mf_queue
         WHERE status = 'dead')
 GROUP BY destination, status
 ORDER BY destination, status
