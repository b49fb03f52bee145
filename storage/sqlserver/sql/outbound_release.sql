-- Release outbound @outbound's hold, if any; returns how many rows it
-- deleted (1 when it had one). DATALENGTH: T-SQL compares names padded
-- with spaces.
SET NOCOUNT ON;
DELETE FROM mf_outbound_holds
 WHERE outbound = @outbound AND DATALENGTH(outbound) = DATALENGTH(@outbound);
SELECT @@ROWCOUNT AS deleted;
