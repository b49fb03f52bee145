INSERT INTO mf_schema_migrations (version, name) VALUES (@version, @name);
