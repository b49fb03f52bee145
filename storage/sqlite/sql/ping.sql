-- Reachable and migrated: the lease row exists only after the first migration.
SELECT count(*) FROM mf_leader_lease
