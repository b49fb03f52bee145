-- Renew only the exact owner and term. Renewing after expiry is safe when
-- nobody else has been elected meanwhile: the term would have changed.
UPDATE mf_leader_lease
   SET expires_at = now() + make_interval(secs => $3)
 WHERE name = 'leader' AND owner = $1 AND term = $2
RETURNING owner, term, acquired_at, expires_at, now()
