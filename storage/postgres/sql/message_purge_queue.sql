-- Only finished rows, only older than the cut-off, at most $2 at a time.
-- Returns each deleted row's message, for message_purge_freed.sql.
--
-- The ids go to the DELETE as an array (an InitPlan run once), which it
-- looks up by primary key: as "id IN (SELECT ...)" the planner joined the
-- candidates to mf_queue, and with a backlog older than the cut-off (or in
-- a generic plan) it costed the join as a hash over every row of the table,
-- so each batch read all of mf_queue (TestAPurgeCallReadsWhatItDeletesNotTheTables).
--
-- The candidates (found oldest first) are locked FOR UPDATE in id order
-- before the DELETE, which then deletes only rows this transaction holds:
-- the order of the DELETE's own locks is that of its plan's scan, id order
-- for an index scan of the primary key but heap order (the order the rows
-- were last written) for the sequential or bitmap scan the planner takes on
-- a small table. An operator's resend-dead (queue_resend_dead_pick.sql) and
-- resend (message_resend_lock.sql) lock the finished rows they want in id
-- order too, and no row lock either takes afterwards can be one the purge
-- holds (they take the ingest lock, insert new rows and update rows they
-- hold): whichever of two of them locks the lower of the rows both want
-- first goes on, and the other waits for it without holding a row it
-- wants, so they cannot deadlock
-- (TestAResendDeadAndAPurgeOfTheSameDeadRowsDoNotDeadlock). A row another
-- transaction changed meanwhile is checked again once its lock is granted,
-- and one deleted is left out.
DELETE FROM mf_queue
 WHERE id = ANY (ARRAY(SELECT id FROM mf_queue
                        WHERE id = ANY (ARRAY(SELECT id FROM mf_queue
                                               WHERE status IN ('done', 'dead')
                                                 AND updated_at < now() - make_interval(secs => $1)
                                               ORDER BY updated_at
                                               LIMIT $2))
                        ORDER BY id
                          FOR UPDATE))
RETURNING message_id
