-- config_failed_version, config_error: see storage/postgres/migrations/0012_config_error.sql.
ALTER TABLE mf_nodes ADD COLUMN config_failed_version INTEGER NOT NULL DEFAULT 0;
ALTER TABLE mf_nodes ADD COLUMN config_error TEXT NOT NULL DEFAULT '';
