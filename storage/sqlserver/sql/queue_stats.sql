-- Unfinished and dead rows only: done rows grow without bound until purged
-- and are not worth a scan per metrics scrape. The two branches can each
-- read a filtered index (mf_queue_lane_head, mf_queue_dead): one IN list of
-- the three statuses is covered by neither filter, and was a scan of the
-- whole table at every scrape (as on PostgreSQL, where
-- TestQueueStatsReadsNoDoneRows measured it).
-- held: the blocked lanes (a held row is always its lane's head).
-- Grouped by DATALENGTH too: T-SQL compares strings padded with spaces, and
-- destinations "lab" and "lab " are two (see queue_lanes.sql).
-- The last column is the age of the oldest unfinished row, in microseconds
-- on the database's clock (0 for dead rows; DATEDIFF_BIG, as in
-- queue_lanes.sql).
SELECT destination, status, COUNT_BIG(*) AS n,
       SUM(CAST(held AS BIGINT)) AS held,
       COALESCE(DATEDIFF_BIG(microsecond, MIN(created_at), SYSUTCDATETIME()), 0) AS oldest_us
  FROM (SELECT destination, status, held, created_at
          FROM mf_queue
         WHERE status IN (N'pending', N'inflight')
        UNION ALL
        SELECT destination, status, held, CAST(NULL AS DATETIME2(6))
          FROM mf_queue
         WHERE status = N'dead') AS q
 GROUP BY destination, DATALENGTH(destination), status
 ORDER BY destination, status;
