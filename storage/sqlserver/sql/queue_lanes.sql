-- A page of the lanes with work: those after @after, at most @limit
-- (storage.Store.QueueLanes), with depth, head row and head age
-- (microseconds on the database clock; DATEDIFF_BIG, as a plain DATEDIFF in
-- microseconds overflows after 35 minutes). The inner query walks
-- mf_queue_lane_head in (lane, id) order (its filter repeated word for
-- word) and stops after @limit lanes, so a page reads its own lanes' rows.
-- Grouped and ordered by DATALENGTH too: T-SQL compares strings padded with
-- spaces, and lanes "x/123" and "x/123 " are two lanes; the keyset
-- (lane, DATALENGTH(lane)) puts the second after the first, so a walk of
-- pages meets each once.
SET NOCOUNT ON;
DECLARE @now DATETIME2(6) = SYSUTCDATETIME();
SELECT q.lane, q.destination, d.depth,
       q.id, q.message_id, q.destination, q.lane, q.status, q.attempts, q.next_attempt_at,
       q.lease_owner, q.lease_expires_at, q.last_error, q.created_at, q.updated_at, q.held,
       DATEDIFF_BIG(microsecond, q.created_at, @now) AS head_age_us,
       -- claimable: what QueueClaimNext would take now
       CAST(CASE WHEN (q.status = N'pending' AND q.held = 0 AND q.next_attempt_at <= @now)
                   OR (q.status = N'inflight' AND q.lease_expires_at <= @now)
                 THEN 1 ELSE 0 END AS BIT) AS claimable,
       COALESCE(q.last_error_detail, N'')
  FROM (SELECT TOP (@limit) lane, DATALENGTH(lane) AS lane_bytes, COUNT_BIG(*) AS depth, MIN(id) AS head_id
          FROM mf_queue WITH (INDEX(mf_queue_lane_head))
         WHERE status IN (N'pending', N'inflight')
           AND (lane > @after OR (lane = @after AND DATALENGTH(lane) > DATALENGTH(@after)))
         GROUP BY lane, DATALENGTH(lane)
         ORDER BY lane, DATALENGTH(lane)) AS d
  JOIN mf_queue AS q ON q.id = d.head_id
 ORDER BY d.lane, d.lane_bytes;
