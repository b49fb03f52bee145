-- Whether mf_schema_migrations exists in the schema migrate_table.sql would
-- create it in. Asked first because CREATE TABLE IF NOT EXISTS needs the
-- CREATE privilege on the schema even when the table exists, and a node may
-- run as a role without it once the schema is migrated.
SELECT EXISTS (SELECT 1
                 FROM pg_catalog.pg_class c
                 JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = current_schema() AND c.relname = 'mf_schema_migrations')
