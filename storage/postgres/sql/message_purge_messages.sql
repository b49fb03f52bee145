-- Messages past the cut-off with no queue row left (finished and purged, or
-- never routed), at most $2 at a time, oldest first.
--
-- Shaped so that no plan reads a whole table (TestAPurgeCallReadsWhatItDeletesNotTheTables):
-- the candidates are walked in received_at order and each is looked up in
-- mf_queue_message by a LATERAL subquery, which the planner can only run
-- per message and the walk stops at $2 found; as a NOT EXISTS, with a
-- backlog older than the cut-off (or in a generic plan) it became a hash
-- anti join over every row of both tables. The ids go to the DELETE as an
-- array, looked up by primary key, as in message_purge_queue.sql.
DELETE FROM mf_messages
 WHERE id = ANY (ARRAY(SELECT m.id
                         FROM mf_messages m
                         LEFT JOIN LATERAL (SELECT 1 AS queued
                                              FROM mf_queue q
                                             WHERE q.message_id = m.id
                                             LIMIT 1) q ON true
                        WHERE m.received_at < now() - make_interval(secs => $1)
                          AND q.queued IS NULL
                        ORDER BY m.received_at
                        LIMIT $2))
