-- Pending migrations on a schema in use wait for the locks of the nodes
-- still running (a rolling upgrade), and those nodes' writes then wait
-- behind the migrations: each lock is waited for at most 2 s (error 1222
-- after), and Migrate rolls back and tries the whole transaction again.
-- A session setting, not the transaction's: migrate_lock_timeout_reset.sql
-- undoes it before the connection goes back to the pool.
SET LOCK_TIMEOUT 2000;
