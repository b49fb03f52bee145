-- Insert on first beat; a left tombstone with the same id comes back active
-- with a new started_at, and so does any row at the first beat of a process
-- (@started: a run of a pinned node id that crashed left its row active). HOLDLOCK makes the MERGE's read of the key
-- serialisable, so two first beats of one id cannot both insert (the second
-- waits and updates). One statement, so it is atomic without a transaction.
SET NOCOUNT ON;
DECLARE @now DATETIME2(6) = SYSUTCDATETIME();
MERGE mf_nodes WITH (HOLDLOCK) AS n
USING (VALUES (@node_id)) AS s (node_id)
   ON n.node_id = s.node_id
WHEN MATCHED THEN
    UPDATE SET host = @host,
               pid = @pid,
               started_at = CASE WHEN n.status = N'left' OR @started = 1 THEN @now ELSE n.started_at END,
               status = N'active',
               last_seen = @now,
               is_leader = @is_leader,
               config_version = @config_version,
               config_fingerprint = @config_fingerprint,
               config_failed_version = @config_failed_version,
               config_error = @config_error
WHEN NOT MATCHED THEN
    INSERT (node_id, host, pid, status, started_at, last_seen, is_leader, config_version, config_fingerprint,
            config_failed_version, config_error)
    VALUES (@node_id, @host, @pid, N'active', @now, @now, @is_leader, @config_version, @config_fingerprint,
            @config_failed_version, @config_error);
