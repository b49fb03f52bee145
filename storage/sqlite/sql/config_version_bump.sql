INSERT INTO mf_config (name, version) VALUES (?1, 1)
ON CONFLICT (name) DO UPDATE SET version = version + 1
RETURNING version
