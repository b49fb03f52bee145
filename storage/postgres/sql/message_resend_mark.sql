-- Last of an operator's resend (storage.Store.MessageResend), after
-- message_resend.sql in its transaction: message $1's dead rows of each
-- destination of $2 are marked resent as its new row there ($3, in the same
-- order), as a resend-dead marks them (queue_resend_dead_mark.sql), so that
-- a resend-dead of the destination does not queue the message a third
-- time. They stay dead.
UPDATE mf_queue
   SET resent_as = d.new_id
  FROM unnest($2::text[], $3::bigint[]) AS d(destination, new_id)
 WHERE mf_queue.message_id = $1 AND mf_queue.destination = d.destination
   AND mf_queue.status = 'dead' AND mf_queue.resent_as IS NULL
