-- The lease and the database clock, in one statement.
SELECT owner, term, acquired_at, expires_at, CAST(round(unixepoch('subsec') * 1000) AS INTEGER)
  FROM mf_leader_lease WHERE name = 'leader'
