-- A page of the lanes with work: those after $1 in lane order, at most $2
-- (storage.Store.QueueLanes). The inner query walks the partial index
-- mf_queue_lane_head in (lane, id) order (its predicate repeated word for
-- word) and stops after $2 lanes, so a page reads its own lanes' rows only
-- and needs no sort; each head is then read by primary key (a LATERAL
-- subquery with a LIMIT, which the planner cannot turn into a hash join:
-- as a plain join, a generic plan made on a smaller table read every row
-- of mf_queue, finished ones too, for the heads of one page). As one
-- statement for every lane it was a hash aggregate of all unfinished rows,
-- a hash join against the whole table and a sort spilled to disk.
SELECT q.lane, q.destination, d.depth,
       q.id, q.message_id, q.destination, q.lane, q.status, q.attempts, q.next_attempt_at,
       q.lease_owner, q.lease_expires_at, q.last_error, q.created_at, q.updated_at, q.held,
       EXTRACT(EPOCH FROM now() - q.created_at)::float8,
       -- claimable: what QueueClaimNext would take now
       (q.status = 'pending' AND NOT q.held AND q.next_attempt_at <= now())
         OR (q.status = 'inflight' AND q.lease_expires_at <= now()),
       q.last_error_detail
  FROM (SELECT lane, count(*) AS depth, min(id) AS head_id
          FROM mf_queue
         WHERE status IN ('pending', 'inflight') AND lane > $1
         GROUP BY lane
         ORDER BY lane
         LIMIT $2) d
 CROSS JOIN LATERAL (SELECT * FROM mf_queue h WHERE h.id = d.head_id LIMIT 1) q
 ORDER BY d.lane
