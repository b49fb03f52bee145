-- Operator retry: unheld and due now, with a fresh set of attempts (see
-- storage/postgres/sql/queue_release.sql). Only a pending row: one in flight
-- is being delivered, one finished has nothing left to retry. ?1 id.
UPDATE mf_queue
   SET held = 0, attempts_at_retry = attempts, next_attempt_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER), updated_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
 WHERE id = ?1 AND status = 'pending'
 RETURNING message_id, destination
