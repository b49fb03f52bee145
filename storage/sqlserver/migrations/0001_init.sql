-- The mf schema, version 1, in T-SQL: the same tables, columns, CHECK
-- constraints and indexes as the PostgreSQL dialect's 0001_init.sql.
--
-- Batches: Migrate splits this file on lines that are exactly GO (the batch
-- separator of sqlcmd and SSMS; it is not T-SQL) and runs every batch in the
-- one migration transaction.
--
-- Types:
--   * ids are BIGINT IDENTITY; times are DATETIME2(6), always UTC, always
--     written from SYSUTCDATETIME(): the database clock, never a node's.
--   * Names that are compared or keyed (lease owner, node id, destination,
--     lane, statuses, config name) use the binary collation
--     Latin1_General_100_BIN2, so that they compare exactly, case and accent
--     included, as PostgreSQL text does (a server's default collation is
--     usually case-insensitive: 'lab/P1' and 'lab/p1' would be one lane).
--     T-SQL still ignores trailing spaces in comparisons, whatever the
--     collation.
--   * Key lengths fit SQL Server's index key limits (900 bytes for a
--     clustered key, 1700 for a nonclustered one, SQL Server 2016 and later):
--     node ids, owners, destinations and config names up to 450 characters,
--     lanes up to 800. Free text is NVARCHAR(MAX), payloads VARBINARY(MAX).
--
-- Filtered indexes, and every later write to a table that has one, need these
-- SET options. go-mssqldb logs in as an ODBC client, which sets them; they are
-- set here as well so that the schema never depends on a server default.
-- XACT_ABORT makes any error in a later batch roll the whole migration back
-- at once. (Session settings: they last for the batches that follow, on this
-- connection, until the pool resets it.)
SET XACT_ABORT ON;
SET ANSI_NULLS ON;
SET ANSI_PADDING ON;
SET ANSI_WARNINGS ON;
SET ARITHABORT ON;
SET CONCAT_NULL_YIELDS_NULL ON;
SET NUMERIC_ROUNDABORT OFF;
SET QUOTED_IDENTIFIER ON;
GO

-- The leader lease: exactly one row. It starts never elected (owner '', term
-- 0), which is the only state the zero (single-node) fence matches.
CREATE TABLE mf_leader_lease (
    name        NVARCHAR(16)  COLLATE Latin1_General_100_BIN2 NOT NULL
                CONSTRAINT mf_leader_lease_pk PRIMARY KEY
                CONSTRAINT mf_leader_lease_name_ck CHECK (name = N'leader'),
    owner       NVARCHAR(450) COLLATE Latin1_General_100_BIN2 NOT NULL
                CONSTRAINT mf_leader_lease_owner_df DEFAULT N'',
    term        BIGINT        NOT NULL CONSTRAINT mf_leader_lease_term_df DEFAULT 0,
    acquired_at DATETIME2(6)  NOT NULL CONSTRAINT mf_leader_lease_acquired_at_df DEFAULT '1970-01-01',
    expires_at  DATETIME2(6)  NOT NULL CONSTRAINT mf_leader_lease_expires_at_df DEFAULT '1970-01-01'
);
INSERT INTO mf_leader_lease (name, owner, term, acquired_at, expires_at)
VALUES (N'leader', N'', 0, '1970-01-01', '1970-01-01');

CREATE TABLE mf_nodes (
    node_id        NVARCHAR(450) COLLATE Latin1_General_100_BIN2 NOT NULL
                   CONSTRAINT mf_nodes_pk PRIMARY KEY,
    host           NVARCHAR(MAX) NOT NULL,
    pid            BIGINT        NOT NULL,
    status         NVARCHAR(16)  COLLATE Latin1_General_100_BIN2 NOT NULL
                   CONSTRAINT mf_nodes_status_ck CHECK (status IN (N'active', N'left')),
    started_at     DATETIME2(6)  NOT NULL,
    last_seen      DATETIME2(6)  NOT NULL,
    is_leader      BIT           NOT NULL CONSTRAINT mf_nodes_is_leader_df DEFAULT 0,
    config_version BIGINT        NOT NULL CONSTRAINT mf_nodes_config_version_df DEFAULT 0
);

CREATE TABLE mf_messages (
    id           BIGINT IDENTITY(1, 1) NOT NULL CONSTRAINT mf_messages_pk PRIMARY KEY,
    inbound      NVARCHAR(MAX)  NOT NULL,
    received_at  DATETIME2(6)   NOT NULL CONSTRAINT mf_messages_received_at_df DEFAULT SYSUTCDATETIME(),
    control_id   NVARCHAR(MAX)  NOT NULL CONSTRAINT mf_messages_control_id_df DEFAULT N'',
    message_type NVARCHAR(MAX)  NOT NULL CONSTRAINT mf_messages_message_type_df DEFAULT N'',
    payload      VARBINARY(MAX) NOT NULL,
    status       NVARCHAR(16)   COLLATE Latin1_General_100_BIN2 NOT NULL
                 CONSTRAINT mf_messages_status_ck CHECK (status IN (N'routed', N'unrouted', N'rejected')),
    error        NVARCHAR(MAX)  NOT NULL CONSTRAINT mf_messages_error_df DEFAULT N''
);
CREATE INDEX mf_messages_received_at ON mf_messages (received_at);

CREATE TABLE mf_queue (
    id               BIGINT IDENTITY(1, 1) NOT NULL CONSTRAINT mf_queue_pk PRIMARY KEY,
    message_id       BIGINT        NOT NULL
                     CONSTRAINT mf_queue_message_fk REFERENCES mf_messages (id),
    destination      NVARCHAR(450) COLLATE Latin1_General_100_BIN2 NOT NULL,
    lane             NVARCHAR(800) COLLATE Latin1_General_100_BIN2 NOT NULL,
    status           NVARCHAR(16)  COLLATE Latin1_General_100_BIN2 NOT NULL
                     CONSTRAINT mf_queue_status_df DEFAULT N'pending'
                     CONSTRAINT mf_queue_status_ck CHECK (status IN (N'pending', N'inflight', N'done', N'dead')),
    attempts         BIGINT        NOT NULL CONSTRAINT mf_queue_attempts_df DEFAULT 0,
    next_attempt_at  DATETIME2(6)  NOT NULL CONSTRAINT mf_queue_next_attempt_at_df DEFAULT SYSUTCDATETIME(),
    lease_owner      NVARCHAR(450) COLLATE Latin1_General_100_BIN2 NOT NULL
                     CONSTRAINT mf_queue_lease_owner_df DEFAULT N'',
    lease_expires_at DATETIME2(6)  NULL,
    last_error       NVARCHAR(MAX) NOT NULL CONSTRAINT mf_queue_last_error_df DEFAULT N'',
    created_at       DATETIME2(6)  NOT NULL CONSTRAINT mf_queue_created_at_df DEFAULT SYSUTCDATETIME(),
    updated_at       DATETIME2(6)  NOT NULL CONSTRAINT mf_queue_updated_at_df DEFAULT SYSUTCDATETIME()
);
-- The lane head: lowest id of a lane among rows not finished. The claim finds
-- its head through this index (queue_claim_next.sql names it in a hint, and
-- repeats its filter word for word so that the hint always applies).
CREATE INDEX mf_queue_lane_head ON mf_queue (lane, id) WHERE status IN (N'pending', N'inflight');
-- The expired-lease sweep and promotion recovery.
CREATE INDEX mf_queue_inflight ON mf_queue (lease_expires_at) WHERE status = N'inflight';
-- Retention purge.
CREATE INDEX mf_queue_finished ON mf_queue (updated_at) WHERE status IN (N'done', N'dead');
CREATE INDEX mf_queue_message ON mf_queue (message_id);
-- Dead-row counts per destination without scanning finished rows.
CREATE INDEX mf_queue_dead ON mf_queue (destination) WHERE status = N'dead';

CREATE TABLE mf_config (
    name    NVARCHAR(450) COLLATE Latin1_General_100_BIN2 NOT NULL CONSTRAINT mf_config_pk PRIMARY KEY,
    version BIGINT        NOT NULL
);
GO

-- The rows of one ingest batch, passed as table-valued parameters so that a
-- whole batch is one round trip (message_ingest.sql). Strings are
-- NVARCHAR(MAX) here, as the driver sends them; the tables' own types and
-- CHECK constraints judge the values. ord numbers the messages 1..n and each
-- message's deliveries 1..k, in the order of the batch.
CREATE TYPE mf_ingest_message AS TABLE (
    ord          INT            NOT NULL PRIMARY KEY,
    inbound      NVARCHAR(MAX)  NOT NULL,
    control_id   NVARCHAR(MAX)  NOT NULL,
    message_type NVARCHAR(MAX)  NOT NULL,
    payload      VARBINARY(MAX) NOT NULL,
    status       NVARCHAR(MAX)  NOT NULL,
    error        NVARCHAR(MAX)  NOT NULL
);
CREATE TYPE mf_ingest_delivery AS TABLE (
    message_ord INT           NOT NULL,
    ord         INT           NOT NULL,
    destination NVARCHAR(MAX) NOT NULL,
    lane        NVARCHAR(MAX) NOT NULL,
    PRIMARY KEY (message_ord, ord)
);
