-- The dead rows an operator's resend-dead may still queue again, in id
-- order per destination (PostgreSQL's migration 0015): the order
-- queue_resend_dead_pick.sql reads them in, a chunk at a time from where
-- the last one ended. mf_queue_dead holds a destination's dead rows in no id
-- order and keeps those resent (they stay dead), so a chunk read through it
-- read and sorted all of them, and one through the primary key walked every
-- row of every destination from the chunk's start. The pick names this
-- index in a hint and repeats its filter word for word, so that the
-- filtered index always matches. Resends and new dead rows are rare: the
-- index costs nothing on the lanes' hot writes (a row entering it is one
-- set aside).
--
-- Built offline in the migrations' transaction (ONLINE is not in every
-- edition): it reads mf_queue once, and writes to mf_queue wait that long.
--
-- A filtered index needs these SET options (see 0001_init.sql); set here
-- too, so that it never depends on the session's defaults.
SET XACT_ABORT ON;
SET ANSI_NULLS ON;
SET ANSI_PADDING ON;
SET ANSI_WARNINGS ON;
SET ARITHABORT ON;
SET CONCAT_NULL_YIELDS_NULL ON;
SET NUMERIC_ROUNDABORT OFF;
SET QUOTED_IDENTIFIER ON;
GO

CREATE INDEX mf_queue_dead_unsent ON mf_queue (destination, id) WHERE status = N'dead' AND resent_as IS NULL;
