-- Waits for locks without end again (the default), after
-- migrate_lock_timeout.sql, on the same connection, before it goes back to
-- the pool: every other statement of the dialect waits as long as it must.
SET LOCK_TIMEOUT -1;
