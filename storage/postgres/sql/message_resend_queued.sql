-- Whether message $1 has a queue row left (see message_resend_lock.sql).
SELECT EXISTS (SELECT 1 FROM mf_queue WHERE message_id = $1)
