-- Only finished rows, only older than the cut-off, at most ?2 at a time.
-- ?1 the cut-off age in milliseconds. Returns each deleted row's message,
-- for message_purge_freed.sql.
DELETE FROM mf_queue
 WHERE id IN (SELECT id FROM mf_queue
               WHERE status IN ('done', 'dead')
                 AND updated_at < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - ?1
               ORDER BY updated_at
               LIMIT ?2)
RETURNING message_id
