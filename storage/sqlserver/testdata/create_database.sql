-- A fresh database for one test, with READ_COMMITTED_SNAPSHOT set as asked
-- (@snapshot), whatever the model database says: the dialect must be correct
-- in both modes. CREATE and ALTER DATABASE take no parameters, so the name
-- goes into dynamic SQL, quoted by QUOTENAME.
DECLARE @sql NVARCHAR(MAX) = N'CREATE DATABASE ' + QUOTENAME(@name) + N';';
EXEC (@sql);
SET @sql = N'ALTER DATABASE ' + QUOTENAME(@name) + N' SET READ_COMMITTED_SNAPSHOT '
         + CASE WHEN @snapshot = 1 THEN N'ON' ELSE N'OFF' END + N';';
EXEC (@sql);
