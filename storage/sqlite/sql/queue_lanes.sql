-- A page of the lanes with work: those after ?1 in lane order, at most ?2
-- (storage.Store.QueueLanes), walked in mf_queue_lane_head's (lane, id)
-- order (its WHERE term repeated verbatim), so a page reads its own lanes'
-- index entries only.
-- The last column is the head's age in milliseconds on the database clock.
SELECT q.lane, q.destination, d.depth,
       q.id, q.message_id, q.destination, q.lane, q.status, q.attempts, q.next_attempt_at,
       q.lease_owner, q.lease_expires_at, q.last_error, q.created_at, q.updated_at, q.held,
       CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - q.created_at,
       -- claimable: what QueueClaimNext would take now
       (q.status = 'pending' AND q.held = 0 AND q.next_attempt_at <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
         OR (q.status = 'inflight' AND q.lease_expires_at <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER)),
       q.last_error_detail
  FROM (SELECT lane, count(*) AS depth, min(id) AS head_id
          FROM mf_queue
         WHERE status IN ('pending', 'inflight') AND lane > ?1
         GROUP BY lane
         ORDER BY lane
         LIMIT ?2) d
  JOIN mf_queue q ON q.id = d.head_id
 ORDER BY d.lane
