-- Outbounds an operator has held: see
-- storage/postgres/migrations/0013_outbound_holds.sql. Outbound names are
-- keyed as mf_queue's destinations (binary collation, 450 characters).
CREATE TABLE mf_outbound_holds (
    outbound NVARCHAR(450) COLLATE Latin1_General_100_BIN2 NOT NULL CONSTRAINT mf_outbound_holds_pk PRIMARY KEY,
    held_at  DATETIME2(6)  NOT NULL CONSTRAINT mf_outbound_holds_held_at_df DEFAULT SYSUTCDATETIME()
);
