-- Last of an operator's resend-dead (storage.Store.QueueResendDead): each
-- dead row of $1 is marked resent as the new row of the same position in $2
-- (queue_resend_dead_insert.sql's ids). Its status and updated_at stay: it
-- is still dead, and purged as one when it was set aside.
UPDATE mf_queue
   SET resent_as = d.new_id
  FROM unnest($1::bigint[], $2::bigint[]) AS d(old_id, new_id)
 WHERE mf_queue.id = d.old_id
