-- Takes, for the life of this session, the lock that lets one process run
-- as the single node (cluster disabled) of the schema mf's tables are in:
-- true if taken (or already held by this session), false if another session
-- holds it; with this session's backend pid and start, which tell it apart
-- later (single_node_holder.sql) from any other, a pooler's pid or a pid
-- the server reused included. A single node writes with the zero fence,
-- which every process passes: without this, two of them (a restart that
-- overlaps, a unit started twice) both led, and the second's promotion
-- recovery gave back the rows the first was sending, to be sent again
-- behind newer ones. A clustered node's election takes the same key shared
-- for its transaction (lease_attempt_elect.sql): no node is elected while a
-- single node holds it, and it is not granted here during an election.
SELECT pg_try_advisory_lock(1835401217, hashtext(current_schema())),
       pg_backend_pid(),
       (SELECT a.backend_start FROM pg_stat_activity AS a WHERE a.pid = pg_backend_pid())
