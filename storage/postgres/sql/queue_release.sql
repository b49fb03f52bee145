-- Operator retry: unheld and due now. Only a pending row: one in flight is
-- being delivered, one finished has nothing left to retry.
UPDATE mf_queue
   SET held = false, next_attempt_at = now(), updated_at = now()
 WHERE id = $1 AND (status = 'pending') IS TRUE -- see queue_complete.sql
