-- Ends this node's previous single-node lock session, backend $1 started
-- at $2, which the server still shows holding the lock after the node's
-- side dropped it (a network gone a moment; the server learns of it only
-- from keepalive): a role may end its own sessions, and the lock goes with
-- it. The start guards against a pid the server has since given another
-- session.
SELECT pg_terminate_backend(a.pid)
  FROM pg_stat_activity AS a
 WHERE a.pid = $1 AND a.backend_start = $2
