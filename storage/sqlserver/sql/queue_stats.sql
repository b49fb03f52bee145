-- Unfinished and dead rows only: done rows grow without bound until purged
-- and are not worth a scan per metrics scrape.
-- held: the blocked lanes (a held row is always its lane's head).
SELECT destination, status, COUNT_BIG(*) AS n,
       SUM(CAST(held AS BIGINT)) AS held
  FROM mf_queue
 WHERE status IN (N'pending', N'inflight', N'dead')
 GROUP BY destination, status
 ORDER BY destination, status;
