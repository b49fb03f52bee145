-- The messages of a step of the walk (message_purge_walk.sql: ?1 < id <=
-- ?2, each past the cut-off) that no queue row names: never queued. One
-- that has a row is left to message_purge_freed.sql, which deletes it with
-- its last row. The cut-off (?3 its age in milliseconds) is checked again:
-- a later clock only moves it on.
DELETE FROM mf_messages
 WHERE id > ?1 AND id <= ?2
   AND received_at < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - ?3
   AND NOT EXISTS (SELECT 1 FROM mf_queue q WHERE q.message_id = mf_messages.id)
