-- Renew only the exact owner and term. Renewing after expiry is safe when
-- nobody else has been elected meanwhile: the term would have changed.
-- ?1 owner, ?2 term, ?3 TTL in milliseconds.
UPDATE mf_leader_lease
   SET expires_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER) + ?3
 WHERE name = 'leader' AND owner = ?1 AND term = ?2
RETURNING owner, term, acquired_at, expires_at, CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
