-- Serialises migrations of one database across nodes for the rest of the
-- migration transaction (LockOwner Transaction: released at commit or
-- rollback). Application locks are scoped to the current database, so
-- separate databases (tests) do not wait for each other. The return code is
-- the result: 0 or 1 granted, negative not granted (-1 timeout, -2 cancelled,
-- -3 deadlock victim, -999 error).
DECLARE @result INT;
EXEC @result = sp_getapplock
    @Resource = N'mf_migrate',
    @LockMode = N'Exclusive',
    @LockOwner = N'Transaction',
    @LockTimeout = -1;
SELECT @result;
