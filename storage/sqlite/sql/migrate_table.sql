-- Migrations run in one BEGIN IMMEDIATE transaction, which holds SQLite's
-- single write lock: that is the migration lock (PostgreSQL needs
-- migrate_lock.sql). SQLite DDL is transactional, so a failed migration
-- leaves nothing behind. applied_at is Unix milliseconds.
CREATE TABLE IF NOT EXISTS mf_schema_migrations (
    version    INTEGER NOT NULL PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at INTEGER NOT NULL
) STRICT
