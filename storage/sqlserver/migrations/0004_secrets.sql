-- Cluster secrets: the table of storage/postgres/migrations/0006_secrets.sql
-- in T-SQL. Names compare exactly (binary collation, as the other keys);
-- 128 characters (256 bytes) is well inside the 900-byte clustered key
-- limit. Values are at most storage.MaxSecretBytes (256) bytes.
CREATE TABLE mf_secrets (
    name  NVARCHAR(128)  COLLATE Latin1_General_100_BIN2 NOT NULL CONSTRAINT mf_secrets_pk PRIMARY KEY,
    value VARBINARY(256) NOT NULL
);
