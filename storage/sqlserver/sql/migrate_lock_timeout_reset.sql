-- Waits for locks without end again (the default), after
-- migrate_lock_timeout.sql, on the same connection, before it goes back to
-- the pool: a session's other statements wait as long as they must, but
-- for the lanes' statements, which bound their own waits in their batches
-- (laneLockWait in sqlserver.go).
SET LOCK_TIMEOUT -1;
