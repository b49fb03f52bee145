-- Promotion recovery: owner-scoped and lease-blind. Every row in flight under
-- another owner is re-pended at once, live lease or not: the fence guarantees
-- that owner is no longer acting (its term is over), so waiting out the
-- lease would only delay failover. Rows of this owner are left alone.
--
-- Found first, then updated by id with the condition checked again, as in
-- queue_reclaim_expired.sql. A row in flight above its lane's lowest
-- unfinished row was claimed ahead and never sent, so its attempt is taken
-- back (see storage/postgres/sql/queue_recover_foreign.sql); the lowest is
-- found with the rows, before the update (a row it re-pends stays
-- unfinished, so the lowest does not move).
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @now DATETIME2(6) = SYSUTCDATETIME();
DECLARE @foreign TABLE (id BIGINT NOT NULL PRIMARY KEY, ahead BIT NOT NULL);

INSERT INTO @foreign (id, ahead)
SELECT q.id,
       CASE WHEN q.id > (SELECT MIN(h.id) FROM mf_queue AS h WITH (INDEX(mf_queue_lane_head))
                          WHERE h.lane = q.lane AND DATALENGTH(h.lane) = DATALENGTH(q.lane)
                            AND h.status IN (N'pending', N'inflight'))
            THEN 1 ELSE 0 END
  FROM mf_queue AS q
 WHERE q.status = N'inflight' AND q.lease_owner <> @owner;

UPDATE q
   SET status = N'pending', lease_owner = N'', lease_expires_at = NULL, updated_at = @now,
       attempts = q.attempts - CAST(f.ahead AS INT)
  FROM mf_queue AS q
  JOIN @foreign AS f ON f.id = q.id
 WHERE q.status = N'inflight' AND q.lease_owner <> @owner;
SELECT @@ROWCOUNT AS recovered;
