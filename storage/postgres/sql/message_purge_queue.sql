-- Only finished rows, only older than the cut-off, at most $2 at a time.
DELETE FROM mf_queue
 WHERE id IN (SELECT id FROM mf_queue
               WHERE status IN ('done', 'dead')
                 AND updated_at < now() - make_interval(secs => $1)
               ORDER BY updated_at
               LIMIT $2)
