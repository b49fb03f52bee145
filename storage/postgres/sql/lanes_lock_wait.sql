-- How long the rest of a lanes' batch waits for a row lock ($1, as '1000ms')
-- before its statement fails with SQLSTATE 55P03 (lanebatch.go). Local to
-- the batch's transaction, and queued after the fence, whose table locks are
-- waited for as long as they are held.
SELECT set_config('lock_timeout', $1, true)
