-- Why an operator's skip (queue_skip.sql) matched nothing: no row
-- (storage.ErrNotFound), its status if it is not pending (storage.NotPending),
-- or, pending, the head of its lane ahead of it (storage.NotHead): the lowest
-- id of the lane still pending or in flight, below the row's, through
-- mf_queue_lane_head. NULL when none is ahead. ?1 id.
SELECT q.status,
       (SELECT a.id
          FROM mf_queue a
         WHERE a.lane = q.lane AND a.status IN ('pending', 'inflight') AND a.id < q.id
         ORDER BY a.id
         LIMIT 1)
  FROM mf_queue q
 WHERE q.id = ?1
