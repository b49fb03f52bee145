-- Rows of nodes not seen since the cut-off ($1 seconds ago): stopped or
-- crashed long ago. Every restart with an automatic node id adds a row, so
-- without this mf_nodes (and GET /cluster/nodes) grew for good. A live
-- node's heartbeat keeps its row fresh, and writes it again if it was gone.
DELETE FROM mf_nodes
 WHERE last_seen < now() - make_interval(secs => $1)
