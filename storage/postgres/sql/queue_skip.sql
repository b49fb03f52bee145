-- Operator skip: the pending row is set aside and its lane moves on.
UPDATE mf_queue
   SET status = 'dead', held = false, last_error = $2, last_error_detail = '', updated_at = now()
 WHERE id = $1 AND (status = 'pending') IS TRUE -- see queue_complete.sql
