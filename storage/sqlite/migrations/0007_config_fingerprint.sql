-- config_fingerprint: see storage/postgres/migrations/0010_config_fingerprint.sql.
ALTER TABLE mf_nodes ADD COLUMN config_fingerprint TEXT NOT NULL DEFAULT '';
