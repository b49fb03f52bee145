-- Last of an operator's resend (storage.Store.MessageResend), in its write
-- transaction: message ?1's dead rows of destination ?2 are marked resent as
-- its new row there, ?3 (see storage/postgres/sql/message_resend_mark.sql).
UPDATE mf_queue
   SET resent_as = ?3
 WHERE message_id = ?1 AND destination = ?2 AND status = 'dead' AND resent_as IS NULL
