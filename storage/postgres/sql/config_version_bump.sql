INSERT INTO mf_config AS c (name, version) VALUES ($1, 1)
ON CONFLICT (name) DO UPDATE SET version = c.version + 1
RETURNING version
