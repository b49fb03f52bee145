-- The session that holds the single-node lock of this schema
-- (single_node_lock.sql): its pid and start (which tell this node's own
-- previous session from another's), its application_name ('mf NODE_ID')
-- and its client's address, for the error that names it. No row if it was
-- let go meanwhile. A two-key advisory lock keeps its second key, an int4,
-- in objid, an oid: read as unsigned. Only the exclusive lock a single
-- node holds: a clustered node's election takes it shared for the moment
-- of its transaction (lease_attempt_elect.sql), and is no single node.
SELECT a.pid, a.backend_start, a.application_name, coalesce(host(a.client_addr), 'local socket')
  FROM pg_locks AS l
  JOIN pg_stat_activity AS a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 AND l.mode = 'ExclusiveLock'
   AND l.classid = 1835401217
   AND l.objid::bigint = (hashtext(current_schema())::bigint & 4294967295)
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
 LIMIT 1
