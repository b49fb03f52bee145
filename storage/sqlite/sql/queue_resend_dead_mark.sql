-- An operator's resend-dead (storage.Store.QueueResendDead): dead row ?1 is
-- marked resent as new row ?2 (inserted with message_ingest_queue.sql in the
-- same write transaction). Its status and updated_at stay: it is still dead,
-- and purged as one when it was set aside.
UPDATE mf_queue SET resent_as = ?2 WHERE id = ?1
