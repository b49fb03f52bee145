-- Record how a destination's unfinished rows are laned ($1 destination, $2
-- lane key). Run in a fenced transaction.
INSERT INTO mf_lane_keys (destination, lane_key, updated_at) VALUES ($1, $2, now())
ON CONFLICT (destination) DO UPDATE SET lane_key = excluded.lane_key, updated_at = excluded.updated_at
