-- Unfinished and dead rows only: done rows grow without bound until purged
-- and are not worth a scan per metrics scrape. The two branches can each
-- read a filtered index (mf_queue_lane_head, mf_queue_dead): one IN list of
-- the three statuses is covered by neither filter, and was a scan of the
-- whole table at every scrape (as on PostgreSQL, where
-- TestQueueStatsReadsNoDoneRows measured it).
-- held: the blocked lanes (a held row is always its lane's head).
-- Grouped by DATALENGTH too: T-SQL compares strings padded with spaces, and
-- destinations "lab" and "lab " are two (see queue_lanes.sql).
SELECT destination, status, COUNT_BIG(*) AS n,
       SUM(CAST(held AS BIGINT)) AS held
  FROM (SELECT destination, status, held
          FROM mf_queue
         WHERE status IN (N'pending', N'inflight')
        UNION ALL
        SELECT destination, status, held
          FROM mf_queue
         WHERE status = N'dead') AS q
 GROUP BY destination, DATALENGTH(destination), status
 ORDER BY destination, status;
