-- How each destination's unfinished rows were split into lanes: see
-- storage/postgres/migrations/0011_lane_keys.sql. Destinations are keyed
-- as in mf_queue (binary collation, 450 characters); a lane key is at most
-- storage.MaxLaneKeyBytes (1000) bytes, never more characters.
CREATE TABLE mf_lane_keys (
    destination NVARCHAR(450)  COLLATE Latin1_General_100_BIN2 NOT NULL CONSTRAINT mf_lane_keys_pk PRIMARY KEY,
    lane_key    NVARCHAR(1000) COLLATE Latin1_General_100_BIN2 NOT NULL,
    updated_at  DATETIME2(6)   NOT NULL CONSTRAINT mf_lane_keys_updated_at_df DEFAULT SYSUTCDATETIME()
);
