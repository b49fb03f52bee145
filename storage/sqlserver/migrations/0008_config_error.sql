-- config_failed_version, config_error: see storage/postgres/migrations/0012_config_error.sql.
-- NVARCHAR(1000): storage.MaxConfigErrorBytes bytes are at most 1000 characters.
ALTER TABLE mf_nodes ADD config_failed_version BIGINT NOT NULL
    CONSTRAINT mf_nodes_config_failed_version_df DEFAULT 0;
ALTER TABLE mf_nodes ADD config_error NVARCHAR(1000) COLLATE Latin1_General_100_BIN2 NOT NULL
    CONSTRAINT mf_nodes_config_error_df DEFAULT N'';
