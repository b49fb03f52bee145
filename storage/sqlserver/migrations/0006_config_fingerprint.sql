-- config_fingerprint: see storage/postgres/migrations/0010_config_fingerprint.sql.
-- storage.MaxConfigFingerprintBytes (100) bounds it; ASCII, compared exactly.
ALTER TABLE mf_nodes ADD config_fingerprint NVARCHAR(100) COLLATE Latin1_General_100_BIN2 NOT NULL
    CONSTRAINT mf_nodes_config_fingerprint_df DEFAULT N'';
