-- Whether message ?1 has a queue row left: an operator's resend
-- (storage.Store.MessageResend) adds rows, with message_ingest_queue.sql,
-- only to a message that has some, so never to one the purge could be
-- deleting (a single writer: nothing changes between this look and the
-- inserts, which are in the same write transaction).
SELECT EXISTS (SELECT 1 FROM mf_queue WHERE message_id = ?1)
