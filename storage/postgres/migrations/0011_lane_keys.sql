-- How each destination's unfinished rows were split into lanes: the routes'
-- lane_key for it, as lanes.LaneKeys writes it (one row per destination,
-- written by the leader, fenced: queue_lane_key_record.sql). A lane is
-- computed once, at ingest; a graph that starts with routes that lane a
-- destination otherwise first moves its unfinished rows into the lanes the
-- routes now make (lanes.Relane), so that a lane_key changed across a
-- restart or a failover keeps each key's messages in order. No row yet for
-- a destination (a database older than this table): its rows are laned
-- again once, which moves none that are in the right lane already.
CREATE TABLE mf_lane_keys (
    destination text        PRIMARY KEY,
    lane_key    text        NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now()
);
