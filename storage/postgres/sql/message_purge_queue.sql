-- Only finished rows, only older than the cut-off, at most $2 at a time.
-- Returns each deleted row's message, for message_purge_freed.sql.
--
-- The ids go to the DELETE as an array (an InitPlan run once), which it
-- looks up by primary key: as "id IN (SELECT ...)" the planner joined the
-- candidates to mf_queue, and with a backlog older than the cut-off (or in
-- a generic plan) it costed the join as a hash over every row of the table,
-- so each batch read all of mf_queue (TestAPurgeCallReadsWhatItDeletesNotTheTables).
DELETE FROM mf_queue
 WHERE id = ANY (ARRAY(SELECT id FROM mf_queue
                        WHERE status IN ('done', 'dead')
                          AND updated_at < now() - make_interval(secs => $1)
                        ORDER BY updated_at
                        LIMIT $2))
RETURNING message_id
