-- Operator skip: the pending row is set aside and its lane moves on.
-- ?1 id, ?2 reason.
UPDATE mf_queue
   SET status = 'dead', held = 0, last_error = ?2, last_error_detail = '', updated_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
 WHERE id = ?1 AND status = 'pending'
