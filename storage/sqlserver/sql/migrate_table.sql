IF OBJECT_ID(N'mf_schema_migrations', N'U') IS NULL
    CREATE TABLE mf_schema_migrations (
        version    INT           NOT NULL CONSTRAINT mf_schema_migrations_pk PRIMARY KEY,
        name       NVARCHAR(450) NOT NULL,
        applied_at DATETIME2(6)  NOT NULL
                   CONSTRAINT mf_schema_migrations_applied_at_df DEFAULT SYSUTCDATETIME()
    );
