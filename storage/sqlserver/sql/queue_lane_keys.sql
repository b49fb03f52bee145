-- The laning each destination's unfinished rows were recorded under.
SET NOCOUNT ON;
SELECT destination, lane_key FROM mf_lane_keys;
