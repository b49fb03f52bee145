-- Record how a destination's unfinished rows are laned. Run in a fenced
-- transaction, by the one leader: HOLDLOCK all the same, as every upsert.
SET NOCOUNT ON;
MERGE mf_lane_keys WITH (HOLDLOCK) AS k
USING (VALUES (@destination, @lane_key)) AS s (destination, lane_key)
   ON k.destination = s.destination
WHEN MATCHED THEN
    UPDATE SET lane_key = s.lane_key, updated_at = SYSUTCDATETIME()
WHEN NOT MATCHED THEN
    INSERT (destination, lane_key, updated_at) VALUES (s.destination, s.lane_key, SYSUTCDATETIME());
