SELECT version FROM mf_schema_migrations ORDER BY version
