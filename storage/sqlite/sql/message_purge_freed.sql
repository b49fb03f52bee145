-- The messages whose queue rows message_purge_queue.sql just deleted (?1, a
-- JSON array of their ids) that have no queue row left, past the cut-off
-- (?2 its age in milliseconds): looked up by id, not found by a walk of
-- mf_messages, which went over every message past the cut-off whose rows
-- were not all finished (a destination blocked for days: all its backlog,
-- at every call). At most one message a queue row.
DELETE FROM mf_messages
 WHERE id IN (SELECT DISTINCT f.value FROM json_each(?1) f
               WHERE NOT EXISTS (SELECT 1 FROM mf_queue q WHERE q.message_id = f.value))
   AND received_at < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - ?2
