-- The clock row makes the database time come back even with no nodes.
SELECT clock.db_now, n.node_id, n.host, n.pid, n.status, n.started_at, n.last_seen, n.is_leader, n.config_version, n.config_fingerprint,
       n.config_failed_version, n.config_error
  FROM (SELECT now() AS db_now) AS clock
  LEFT JOIN mf_nodes n ON true
 ORDER BY n.node_id
