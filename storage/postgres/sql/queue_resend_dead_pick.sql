-- First of a transaction of an operator's resend-dead
-- (storage.Store.QueueResendDead), before the ingest lock (a wait here must
-- not hold up the ingest): destination $1's dead rows not resent yet
-- (resent_as), in id order, after id $2 and, when $3 is not 0, before id $3
-- (the call's first new row), set aside (updated_at) in [$4, $5) (NULL: no
-- bound), at most $6, locked until commit. Found through mf_queue_dead.
--
-- The lock orders this with the purge and with another resend-dead, as
-- message_resend_lock.sql does for one message: a purge that deleted a row
-- first makes this wait, and the row is then left out (re-checked after the
-- wait, as a locked row is); a row locked here first makes the purge's
-- delete wait for the commit, after which its next statement
-- (message_purge_freed.sql) sees the new row and keeps the message. A second
-- resend-dead waiting on a row finds it resent (resent_as) after the wait
-- and leaves it out.
SELECT id, message_id, lane
  FROM mf_queue
 WHERE destination = $1 AND status = 'dead' AND resent_as IS NULL
   AND id > $2 AND ($3::bigint = 0 OR id < $3)
   AND ($4::timestamptz IS NULL OR updated_at >= $4)
   AND ($5::timestamptz IS NULL OR updated_at < $5)
 ORDER BY id
 LIMIT $6
   FOR NO KEY UPDATE
