-- Drop a test's database, disconnecting whatever is still connected to it.
IF DB_ID(@name) IS NOT NULL
BEGIN
    DECLARE @sql NVARCHAR(MAX) =
        N'ALTER DATABASE ' + QUOTENAME(@name) + N' SET SINGLE_USER WITH ROLLBACK IMMEDIATE; '
        + N'DROP DATABASE ' + QUOTENAME(@name) + N';';
    EXEC (@sql);
END;
