-- The messages whose queue rows message_purge_queue.sql just deleted ($1,
-- their ids), past the cut-off ($2 its age in seconds), that have no queue
-- row left: looked up by id, not found by a walk of mf_messages, which went
-- over every message past the cut-off whose rows were not all finished (a
-- destination blocked for weeks: all its backlog, at every call).
--
-- A statement of its own after the queue rows' delete, so that its snapshot
-- sees that delete, and a resend's new row if the delete waited for the
-- resend's lock (message_resend_lock.sql). Each id is looked up in
-- mf_queue_message by a LATERAL subquery, which runs once an id whatever
-- the plan (as a NOT EXISTS it could become a hash anti join over mf_queue).
DELETE FROM mf_messages
 WHERE id = ANY (ARRAY(SELECT f.id
                         FROM unnest($1::bigint[]) AS f(id)
                         LEFT JOIN LATERAL (SELECT 1 AS queued
                                              FROM mf_queue q
                                             WHERE q.message_id = f.id
                                             LIMIT 1) q ON true
                        WHERE q.queued IS NULL))
   AND received_at < now() - make_interval(secs => $2)
