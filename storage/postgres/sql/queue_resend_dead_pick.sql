-- First of a transaction of an operator's resend-dead
-- (storage.Store.QueueResendDead), before the ingest lock (a wait here must
-- not hold up the ingest): destination $1's dead rows not resent yet
-- (resent_as), in id order, after id $2 and, when $3 is not 0, before id $3
-- (the call's first new row), set aside (updated_at) in [$4, $5) (NULL: no
-- bound), at most $6, locked until commit. Walks mf_queue_dead_unsent
-- (migration 0015) in id order from $2.
-- With each, its message's inbound and payload, from which the caller
-- computes the lane of its new row by the routes in force
-- (storage.QueueResendDeadParams.Lane); a dead row whose message is gone
-- (none should be: the purge deletes a message only once no row names it)
-- is not found. Only the queue rows are locked (OF q).
--
-- The lock orders this with the purge and with another resend-dead, as
-- message_resend_lock.sql does for one message: a purge that deleted a row
-- first makes this wait, and the row is then left out (re-checked after the
-- wait, as a locked row is); a row locked here first makes the purge's
-- delete wait for the commit, after which its next statement
-- (message_purge_freed.sql) sees the new row and keeps the message. A second
-- resend-dead waiting on a row finds it resent (resent_as) after the wait
-- and leaves it out. The rows are locked in id order (ORDER BY, below the
-- lock), as the purge locks its rows (message_purge_queue.sql): neither can
-- hold a row the other waits for while it waits for one the other holds.
SELECT q.id, q.message_id, q.lane, m.inbound, m.payload
  FROM mf_queue q
  JOIN mf_messages m ON m.id = q.message_id
 WHERE q.destination = $1 AND q.status = 'dead' AND q.resent_as IS NULL
   AND q.id > $2 AND ($3::bigint = 0 OR q.id < $3)
   AND ($4::timestamptz IS NULL OR q.updated_at >= $4)
   AND ($5::timestamptz IS NULL OR q.updated_at < $5)
 ORDER BY q.id
 LIMIT $6
   FOR NO KEY UPDATE OF q
