-- How each destination's unfinished rows were split into lanes: see
-- storage/postgres/migrations/0011_lane_keys.sql. Times are Unix
-- milliseconds, as everywhere in this dialect.
CREATE TABLE mf_lane_keys (
    destination TEXT    NOT NULL PRIMARY KEY,
    lane_key    TEXT    NOT NULL,
    updated_at  INTEGER NOT NULL DEFAULT (CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
) STRICT;
