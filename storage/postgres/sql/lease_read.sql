SELECT owner, term, acquired_at, expires_at, now() FROM mf_leader_lease WHERE name = 'leader'
