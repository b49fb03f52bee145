-- Takes, for the life of this session, the lock that lets one process run
-- as the single node (cluster disabled) of the schema mf's tables are in.
-- A single node writes with the zero fence, which every process passes:
-- without this, two of them (a restart that overlaps, a unit started twice)
-- both led, and the second's promotion recovery gave back the rows the
-- first was sending, to be sent again behind newer ones.
--
-- Application locks are scoped to the current database, so the database is
-- implicit in the lock; its name adds the login's default schema
-- (SCHEMA_NAME()), where mf's unqualified tables resolve, so that two stores
-- in two schemas of one database are two single nodes. CONCAT reads a NULL
-- schema as ''. LockOwner Session: held until the session ends (no
-- transaction needed, a commit does not release it). LockTimeout 0: never
-- waits. A clustered node's election takes the same resource shared, owned
-- by its transaction (lease_attempt_elect.sql): no node is elected while a
-- single node holds it, and it is not granted here during an election
-- (-1; single_node_holder.sql names only a session's lock).
--
-- The result: sp_getapplock's return code, 0 taken (or >= 0), -1 held by
-- another session, other negatives failed (-2 cancelled, -3 deadlock
-- victim, -999 error); then this session's id and login time, which tell
-- this session from any later one with its id (single_node_holder.sql).
DECLARE @resource NVARCHAR(255) = CONCAT(N'mf single node ', SCHEMA_NAME()),
        @result INT;
EXEC @result = sp_getapplock
    @Resource = @resource,
    @LockMode = N'Exclusive',
    @LockOwner = N'Session',
    @LockTimeout = 0;
SELECT @result, s.session_id, s.login_time
  FROM sys.dm_exec_sessions AS s
 WHERE s.session_id = @@SPID;
