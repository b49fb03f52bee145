-- The recurring sweep: only rows whose lease has expired.
--
-- The rows are found first (through mf_queue_inflight, keeping no locks) and
-- then updated by id with the condition checked again under the update's own
-- lock, so that, like every writer of mf_queue, the sweep locks rows before
-- index keys (see queue_claim_next.sql) and re-pends only rows that are
-- still in flight under an expired lease.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @now DATETIME2(6) = SYSUTCDATETIME();
DECLARE @expired TABLE (id BIGINT NOT NULL PRIMARY KEY);

INSERT INTO @expired (id)
SELECT id FROM mf_queue WHERE status = N'inflight' AND lease_expires_at <= @now;

UPDATE q
   SET status = N'pending', lease_owner = N'', lease_expires_at = NULL, updated_at = @now
  FROM mf_queue AS q
  JOIN @expired AS e ON e.id = q.id
 WHERE q.status = N'inflight' AND q.lease_expires_at <= @now;
SELECT @@ROWCOUNT AS reclaimed;
