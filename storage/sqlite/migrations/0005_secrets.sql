-- Cluster secrets: the table of storage/postgres/migrations/0006_secrets.sql
-- in SQLite types. A single-node store has a cluster of one, and its secrets
-- outlive a restart all the same.
CREATE TABLE mf_secrets (
    name  TEXT NOT NULL PRIMARY KEY,
    value BLOB NOT NULL
) STRICT;
