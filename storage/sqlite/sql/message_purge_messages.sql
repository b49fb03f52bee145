-- Messages past the cut-off with no queue row left (finished and purged, or
-- never routed). ?1 the cut-off age in milliseconds, ?2 the limit.
DELETE FROM mf_messages
 WHERE id IN (SELECT m.id FROM mf_messages m
               WHERE m.received_at < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - ?1
                 AND NOT EXISTS (SELECT 1 FROM mf_queue q WHERE q.message_id = m.id)
               ORDER BY m.received_at
               LIMIT ?2)
