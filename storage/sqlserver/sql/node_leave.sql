SET NOCOUNT ON;
UPDATE mf_nodes
   SET status = N'left', is_leader = 0, last_seen = SYSUTCDATETIME()
 WHERE node_id = @node_id;
SELECT @@ROWCOUNT AS updated;
