-- Cluster secrets: values every node of a cluster must share and that must
-- outlive any one process, such as the key of the lane hashes the API shows
-- a viewer. The first value stored under a name stays (secret_insert.sql);
-- nothing updates or deletes a row. Anyone who can read this table can
-- reverse those hashes by trying every lane key, exactly as anyone who can
-- read mf_queue can read the lane keys themselves.
CREATE TABLE mf_secrets (
    name  text  PRIMARY KEY,
    value bytea NOT NULL
);
