-- Unfinished and dead rows only: done rows grow without bound until purged
-- and are not worth a scan per metrics scrape.
SELECT destination, status, count(*)
  FROM mf_queue
 WHERE status IN ('pending', 'inflight', 'dead')
 GROUP BY destination, status
 ORDER BY destination, status
