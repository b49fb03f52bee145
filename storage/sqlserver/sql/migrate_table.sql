-- The migrations' table, created on a new schema. SQL Server resolves a
-- one-part name in the login's default schema first, then in dbo: a login
-- whose default schema is not dbo, on a database whose dbo holds mf's
-- tables, found dbo's here, ran on dbo's tables, and named its single-node
-- lock (single_node_lock.sql) and its ingest lock after its own schema, so
-- that a second single node on dbo's tables was not kept out. Tables found
-- in another schema than the default are refused, saying which.
DECLARE @found SYSNAME = OBJECT_SCHEMA_NAME(OBJECT_ID(N'mf_schema_migrations', N'U'));
IF @found IS NOT NULL AND @found <> SCHEMA_NAME()
BEGIN
    DECLARE @refusal NVARCHAR(2048) = CONCAT(
        N'mf: mf''s tables are in schema ', @found, N', not in this login''s default schema ', SCHEMA_NAME(),
        N': set the database user''s DEFAULT_SCHEMA to ', @found,
        N' (ALTER USER ... WITH DEFAULT_SCHEMA = ...); a store of its own needs a database of its own, or a schema in a database whose dbo holds no mf tables');
    THROW 51010, @refusal, 1;
END;
IF @found IS NULL
    CREATE TABLE mf_schema_migrations (
        version    INT           NOT NULL CONSTRAINT mf_schema_migrations_pk PRIMARY KEY,
        name       NVARCHAR(450) NOT NULL,
        applied_at DATETIME2(6)  NOT NULL
                   CONSTRAINT mf_schema_migrations_applied_at_df DEFAULT SYSUTCDATETIME()
    );
