-- Operator retry: unheld and due now, with a fresh set of attempts: the
-- destination's max_attempts counts from attempts_at_retry. attempts is kept
-- (it only grows; see migrations/0007_attempts_at_retry.sql). Only a pending
-- row: one in flight is being delivered, one finished has nothing left to
-- retry.
UPDATE mf_queue
   SET held = false, next_attempt_at = now(), attempts_at_retry = attempts, updated_at = now()
 WHERE id = $1 AND (status = 'pending') IS TRUE -- see queue_complete.sql
 RETURNING message_id, destination
