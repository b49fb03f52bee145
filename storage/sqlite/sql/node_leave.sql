UPDATE mf_nodes
   SET status = 'left', is_leader = 0, last_seen = CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
 WHERE node_id = ?1
