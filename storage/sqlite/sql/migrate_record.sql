INSERT INTO mf_schema_migrations (version, name, applied_at)
VALUES (?1, ?2, CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
