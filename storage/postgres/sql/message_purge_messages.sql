-- Messages past the cut-off with no queue row left (finished and purged, or
-- never routed).
DELETE FROM mf_messages
 WHERE id IN (SELECT m.id FROM mf_messages m
               WHERE m.received_at < now() - make_interval(secs => $1)
                 AND NOT EXISTS (SELECT 1 FROM mf_queue q WHERE q.message_id = m.id)
               ORDER BY m.received_at
               LIMIT $2)
