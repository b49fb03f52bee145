-- The messages that never had a queue row (unrouted, rejected; and those
-- an older mf's purge left behind): a walk of mf_messages in id order from
-- where the last walk stopped, kept in mf_config as the version of
-- 'message_purge_walked' (the highest id walked past), over at most $2
-- messages past the cut-off ($1 its age in seconds). It stops at the first
-- message not past it (ids come in ingest order, and so, within the ingest
-- lock's waits, do received_at). Each message it passes is looked up in
-- mf_queue (mf_queue_message, by a LATERAL subquery: once a message, in any
-- plan) and deleted if no row names it; one that has a row is left to
-- message_purge_freed.sql, which deletes it with its last row. So each
-- message is walked once in its life, and a backlog past the cut-off (a
-- destination blocked for weeks) is not walked again at every call, as
-- the walk from the oldest message past the cut-off did.
--
-- Returns the messages deleted and the messages walked past: $2 walked
-- past means there may be more to walk.
WITH walk AS MATERIALIZED (
    SELECT m.id, m.received_at < now() - make_interval(secs => $1) AS aged
      FROM mf_messages m
     WHERE m.id > coalesce((SELECT version FROM mf_config WHERE name = 'message_purge_walked'), 0)
     ORDER BY m.id
     LIMIT $2
), passed AS MATERIALIZED (
    SELECT w.id
      FROM walk w
     WHERE w.id < coalesce((SELECT min(n.id) FROM walk n WHERE NOT n.aged), 9223372036854775807)
), gone AS (
    DELETE FROM mf_messages
     WHERE id = ANY (ARRAY(SELECT p.id
                             FROM passed p
                             LEFT JOIN LATERAL (SELECT 1 AS queued
                                                  FROM mf_queue q
                                                 WHERE q.message_id = p.id
                                                 LIMIT 1) q ON true
                            WHERE q.queued IS NULL))
    RETURNING 1
), moved AS (
    INSERT INTO mf_config AS c (name, version)
    SELECT 'message_purge_walked', max(p.id) FROM passed p HAVING count(*) > 0
    ON CONFLICT (name) DO UPDATE SET version = excluded.version
    RETURNING 1
)
SELECT (SELECT count(*) FROM gone), (SELECT count(*) FROM passed)
