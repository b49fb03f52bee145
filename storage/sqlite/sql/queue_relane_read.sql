-- A page of a destination's unfinished rows to lane again (?1 destination),
-- after the row (?2 lane, ?3 id) in (lane, id) order, at most ?4 rows: see
-- storage/postgres/sql/queue_relane_read.sql. The status term repeats the
-- partial index mf_queue_lane_head's verbatim, and INDEXED BY names it: the
-- planner otherwise took mf_queue_stats (destination, status), which reads
-- the destination's rows in another order and sorts all that are left for
-- every page.
SELECT q.id, q.lane, m.inbound, m.payload
  FROM mf_queue AS q INDEXED BY mf_queue_lane_head
  JOIN mf_messages AS m ON m.id = q.message_id
 WHERE q.status IN ('pending', 'inflight')
   AND (q.lane, q.id) > (?2, ?3)
   AND q.destination = ?1
 ORDER BY q.lane, q.id
 LIMIT ?4
