UPDATE mf_nodes SET status = 'left', is_leader = false, last_seen = now() WHERE node_id = $1
