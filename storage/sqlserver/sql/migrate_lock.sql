-- Serialises migrations of one schema across nodes for the rest of the
-- migration transaction (LockOwner Transaction: released at commit or
-- rollback). Application locks are scoped to the current database; the name
-- adds the login's default schema (SCHEMA_NAME()), where mf's unqualified
-- tables resolve, so that stores in two schemas of one database, or two
-- databases (tests), do not wait for each other. An mf before this one took
-- N'mf_migrate' exclusive, whatever the schema: it is taken shared first, as
-- message_ingest.sql does with N'mf_ingest', so that an older mf's migrate
-- (a rolling upgrade) and this one's still exclude each other. The return
-- code is the result: 0 or 1 granted, negative not granted (-1 timeout, -2
-- cancelled, -3 deadlock victim, -999 error).
DECLARE @result INT, @migrate NVARCHAR(255) = CONCAT(N'mf_migrate in ', SCHEMA_NAME());
EXEC @result = sp_getapplock
    @Resource = N'mf_migrate',
    @LockMode = N'Shared',
    @LockOwner = N'Transaction',
    @LockTimeout = -1;
IF @result >= 0
    EXEC @result = sp_getapplock
        @Resource = @migrate,
        @LockMode = N'Exclusive',
        @LockOwner = N'Transaction',
        @LockTimeout = -1;
SELECT @result;
