-- Renew only the exact owner and term. Renewing after expiry is safe when
-- nobody else has been elected meanwhile: the term would have changed. @now is
-- both the base of the new expiry and the returned db_now.
SET NOCOUNT ON;
DECLARE @now DATETIME2(6) = SYSUTCDATETIME();
UPDATE mf_leader_lease
   SET expires_at = DATEADD(microsecond, @ttl_us, DATEADD(second, @ttl_s, @now))
OUTPUT inserted.owner, inserted.term, inserted.acquired_at, inserted.expires_at, @now
 WHERE name = N'leader' AND owner = @owner AND term = @term;
