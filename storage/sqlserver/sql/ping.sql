-- Reachable and migrated: the lease row exists only after the first
-- migration. And writable: a database set READ_ONLY, or a readable
-- secondary of an availability group, answers reads but no write of mf's.
SELECT COUNT_BIG(*),
       CAST(CASE WHEN CAST(DATABASEPROPERTYEX(DB_NAME(), 'Updateability') AS NVARCHAR(128)) = N'READ_ONLY'
                 THEN 1 ELSE 0 END AS BIT)
  FROM mf_leader_lease;
