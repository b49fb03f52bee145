-- Insert on first beat; a left tombstone with the same id comes back active
-- with a new started_at, and so does any row at the first beat of a process
-- ($6: a run of a pinned node id that crashed left its row active). $7 is
-- the node's graph config fingerprint; $8 and $9 its failed reload, if any.
INSERT INTO mf_nodes AS n (node_id, host, pid, status, started_at, last_seen, is_leader, config_version, config_fingerprint,
                           config_failed_version, config_error)
VALUES ($1, $2, $3, 'active', now(), now(), $4, $5, $7, $8, $9)
ON CONFLICT (node_id) DO UPDATE
   SET host = excluded.host,
       pid = excluded.pid,
       started_at = CASE WHEN n.status = 'left' OR $6 THEN now() ELSE n.started_at END,
       status = 'active',
       last_seen = now(),
       is_leader = excluded.is_leader,
       config_version = excluded.config_version,
       config_fingerprint = excluded.config_fingerprint,
       config_failed_version = excluded.config_failed_version,
       config_error = excluded.config_error
