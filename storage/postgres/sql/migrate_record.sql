INSERT INTO mf_schema_migrations (version, name) VALUES ($1, $2)
