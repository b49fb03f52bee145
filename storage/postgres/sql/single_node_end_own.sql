-- Ends backend $1, this node's previous single-node lock session, which the
-- server still shows holding the lock after the node's side dropped it (a
-- network gone a moment; the server learns of it only from keepalive): a
-- role may end its own sessions. The lock goes with it.
SELECT pg_terminate_backend($1)
