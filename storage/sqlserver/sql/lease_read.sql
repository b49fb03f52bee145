SELECT owner, term, acquired_at, expires_at, CAST(SYSUTCDATETIME() AS DATETIME2(6)) AS db_now
  FROM mf_leader_lease
 WHERE name = N'leader';
