-- Rows of nodes not seen since the cut-off (@older_s and @older_us ago):
-- stopped or crashed long ago. Every restart with an automatic node id adds
-- a row, so without this mf_nodes (and GET /cluster/nodes) grew for good. A
-- live node's heartbeat keeps its row fresh, and writes it again if it was
-- gone.
SET NOCOUNT ON;
DECLARE @cutoff DATETIME2(6) =
    DATEADD(microsecond, -@older_us, DATEADD(second, -@older_s, CAST(SYSUTCDATETIME() AS DATETIME2(6))));
DELETE FROM mf_nodes WHERE last_seen < @cutoff;
SELECT CAST(@@ROWCOUNT AS BIGINT) AS deleted;
