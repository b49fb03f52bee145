-- Renew only the exact owner and term. Renewing after expiry is safe when
-- nobody else has been elected meanwhile: the term would have changed. @now is
-- both the base of the new expiry and the returned db_now.
--
-- OUTPUT goes INTO a table variable, as in lease_attempt_elect.sql: a bare
-- OUTPUT clause is refused on a table with an enabled trigger (error 334),
-- and an operator's audit trigger on this table would then stop every
-- renewal, so the leader would fence itself.
SET NOCOUNT ON;
DECLARE @now DATETIME2(6) = SYSUTCDATETIME();
DECLARE @renewed TABLE (
    owner       NVARCHAR(450) NOT NULL,
    term        BIGINT        NOT NULL,
    acquired_at DATETIME2(6)  NOT NULL,
    expires_at  DATETIME2(6)  NOT NULL
);
UPDATE mf_leader_lease
   SET expires_at = DATEADD(microsecond, @ttl_us, DATEADD(second, @ttl_s, @now))
OUTPUT inserted.owner, inserted.term, inserted.acquired_at, inserted.expires_at
  INTO @renewed (owner, term, acquired_at, expires_at)
 WHERE name = N'leader' AND owner = @owner AND term = @term;
SELECT owner, term, acquired_at, expires_at, @now AS db_now
  FROM @renewed;
