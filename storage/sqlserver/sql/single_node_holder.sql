-- The session that holds the single-node lock of this schema
-- (single_node_lock.sql): its id and login time, its program_name ('mf
-- NODE_ID', unless the store url names another app name) and its host_name
-- (the client's machine, as the client gave it), for the error that names
-- it, and for the watch to tell a session of its own that has not ended yet
-- from another process's. No row if it was let go meanwhile.
--
-- sys.dm_tran_locks keeps only the first 32 characters of an application
-- lock's name, in resource_description ('0:[mf single node dbo]:(hash)'):
-- the lock is found by them, in this database, whole between their
-- delimiters (with or without brackets): as a bare substring, schema mf's
-- name matched schema mf2's lock. A schema name longer than 17 characters
-- leaves a name cut at 32, which may not match: the holder is then not
-- named. Reading other sessions' locks needs VIEW SERVER STATE (VIEW
-- DATABASE STATE on Azure SQL Database): without it this fails, the error
-- names no session, and a node whose lock session dropped cannot tell its
-- own from another's: it keeps trying to take the lock, writing meanwhile.
SELECT TOP (1) l.request_session_id, s.login_time,
       COALESCE(s.program_name, N''), COALESCE(s.host_name, N'')
  FROM sys.dm_tran_locks AS l
  JOIN sys.dm_exec_sessions AS s ON s.session_id = l.request_session_id
 WHERE l.resource_type = N'APPLICATION'
   AND l.resource_database_id = DB_ID()
   AND l.request_owner_type = N'SESSION'
   AND l.request_status <> N'WAIT'
   AND l.request_session_id <> @@SPID
   AND (CHARINDEX(CONCAT(N':[', LEFT(CONCAT(N'mf single node ', SCHEMA_NAME()), 32), N']:'), l.resource_description) > 0
        OR CHARINDEX(CONCAT(N':', LEFT(CONCAT(N'mf single node ', SCHEMA_NAME()), 32), N':'), l.resource_description) > 0);
