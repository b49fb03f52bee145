-- First of a write transaction of an operator's resend-dead
-- (storage.Store.QueueResendDead; see
-- storage/postgres/sql/queue_resend_dead_pick.sql): destination ?1's dead
-- rows not resent yet (resent_as), in id order, after id ?2 and, when ?3 is
-- not 0, before id ?3 (the call's first new row), set aside (updated_at,
-- Unix milliseconds) in [?4, ?5) (NULL: no bound), at most ?6, each with
-- its message's inbound and payload (from which the caller computes the
-- lane of its new row by the routes in force). Found through
-- mf_queue_dead. The one writer orders this with the purge and every ingest:
-- nothing changes between this read and the writes of its transaction.
SELECT q.id, q.message_id, q.lane, m.inbound, m.payload
  FROM mf_queue q
  JOIN mf_messages m ON m.id = q.message_id
 WHERE q.destination = ?1 AND q.status = 'dead' AND q.resent_as IS NULL
   AND q.id > ?2 AND (?3 = 0 OR q.id < ?3)
   AND (?4 IS NULL OR q.updated_at >= ?4)
   AND (?5 IS NULL OR q.updated_at < ?5)
 ORDER BY q.id
 LIMIT ?6
