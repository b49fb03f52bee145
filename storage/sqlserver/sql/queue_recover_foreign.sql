-- Promotion recovery: owner-scoped and lease-blind. Every row in flight under
-- another owner is re-pended at once, live lease or not: the fence guarantees
-- that owner is no longer acting (its term is over), so waiting out the
-- lease would only delay failover. Rows of this owner are left alone.
--
-- Found first, then updated by id with the condition checked again, as in
-- queue_reclaim_expired.sql.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @now DATETIME2(6) = SYSUTCDATETIME();
DECLARE @foreign TABLE (id BIGINT NOT NULL PRIMARY KEY);

INSERT INTO @foreign (id)
SELECT id FROM mf_queue WHERE status = N'inflight' AND lease_owner <> @owner;

UPDATE q
   SET status = N'pending', lease_owner = N'', lease_expires_at = NULL, updated_at = @now
  FROM mf_queue AS q
  JOIN @foreign AS f ON f.id = q.id
 WHERE q.status = N'inflight' AND q.lease_owner <> @owner;
SELECT @@ROWCOUNT AS recovered;
