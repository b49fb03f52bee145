-- Unfinished and dead rows only: done rows grow without bound until purged
-- and are not worth a scan per metrics scrape.
-- held: the blocked lanes (a held row is always its lane's head).
SELECT destination, status, count(*), count(*) FILTER (WHERE held)
  FROM mf_queue
 WHERE status IN ('pending', 'inflight', 'dead')
 GROUP BY destination, status
 ORDER BY destination, status
