-- A page of a destination's unfinished rows to lane again, after the row
-- (@after_lane, @after_id) in (lane, id) order, at most @limit rows: see
-- storage/postgres/sql/queue_relane_read.sql. The keyset walks
-- mf_queue_lane_head, its filter repeated word for word.
--
-- DATALENGTH: T-SQL compares strings padded with spaces, so destinations
-- "lab" and "lab " are two destinations only with it (as in every statement
-- that matches a destination); without it a walk of "lab" read the rows of
-- "lab " too, and moved them into lanes of "lab".
--
-- The lane keyset has none, on purpose: lanes that differ only in trailing
-- spaces compare equal, here as in the index, so they are one key of the
-- walk, their rows ordered by id, and (lane, id) is one order that the
-- index, the keyset and the ORDER BY all agree on: the walk meets every row
-- once, and in index order, so a page reads only its own rows. A keyset on
-- (lane, DATALENGTH(lane), id), as queue_lanes.sql pages lanes, would order
-- by a value the index does not hold, and sort all the destination's rows
-- left to walk for every page.
SET NOCOUNT ON;
SELECT TOP (@limit) q.id, q.lane, m.inbound, m.payload
  FROM mf_queue AS q WITH (INDEX(mf_queue_lane_head))
  JOIN mf_messages AS m ON m.id = q.message_id
 WHERE q.status IN (N'pending', N'inflight')
   AND (q.lane > @after_lane OR (q.lane = @after_lane AND q.id > @after_id))
   AND q.destination = @destination AND DATALENGTH(q.destination) = DATALENGTH(@destination)
 ORDER BY q.lane, q.id;
