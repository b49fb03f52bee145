-- A page of a destination's unfinished rows to lane again ($1 destination),
-- after the row ($2 lane, $3 id) in (lane, id) order, at most $4 rows. The
-- keyset walks the partial index mf_queue_lane_head (its predicate repeated
-- word for word), so that every page costs its own rows, not a scan of the
-- queue: the whole walk reads each unfinished row once (a row moved to a
-- lane further on is read again, and stays where it is then).
SELECT q.id, q.lane, m.inbound, m.payload
  FROM mf_queue AS q
  JOIN mf_messages AS m ON m.id = q.message_id
 WHERE q.status IN ('pending', 'inflight')
   AND (q.lane, q.id) > ($2, $3)
   AND q.destination = $1
 ORDER BY q.lane, q.id
 LIMIT $4
