-- A page of a destination's unfinished rows to lane again, after the row
-- (@after_lane, @after_id) in (lane, id) order, at most @limit rows: see
-- storage/postgres/sql/queue_relane_read.sql. The keyset walks
-- mf_queue_lane_head, its filter repeated word for word. T-SQL compares
-- strings padded with spaces, as the index orders them, so lanes that
-- differ only in trailing spaces are one key here, ordered by id: the walk
-- still meets every row once.
SET NOCOUNT ON;
SELECT TOP (@limit) q.id, q.lane, m.inbound, m.payload
  FROM mf_queue AS q WITH (INDEX(mf_queue_lane_head))
  JOIN mf_messages AS m ON m.id = q.message_id
 WHERE q.status IN (N'pending', N'inflight')
   AND (q.lane > @after_lane OR (q.lane = @after_lane AND q.id > @after_id))
   AND q.destination = @destination
 ORDER BY q.lane, q.id;
