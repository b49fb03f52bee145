-- Hold outbound @outbound, unless it is held already (its held_at stays):
-- an operator's hold, idempotent. UPDLOCK, HOLDLOCK make the NOT EXISTS
-- read take a key-range update lock to the end of the statement, so that
-- of two operators holding one outbound at once the second waits and
-- inserts nothing (instead of failing on the primary key), as
-- secret_insert.sql. DATALENGTH: T-SQL compares names padded with spaces.
-- Returns whether it made the hold, and the hold's held_at.
SET NOCOUNT ON;
INSERT INTO mf_outbound_holds (outbound, held_at)
SELECT @outbound, SYSUTCDATETIME()
 WHERE NOT EXISTS (SELECT 1 FROM mf_outbound_holds WITH (UPDLOCK, HOLDLOCK)
                    WHERE outbound = @outbound AND DATALENGTH(outbound) = DATALENGTH(@outbound));
DECLARE @added INT = @@ROWCOUNT;
SELECT @added AS added, held_at FROM mf_outbound_holds
 WHERE outbound = @outbound AND DATALENGTH(outbound) = DATALENGTH(@outbound);
