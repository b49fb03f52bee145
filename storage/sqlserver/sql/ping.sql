-- Reachable and migrated: the lease row exists only after the first migration.
SELECT COUNT_BIG(*) FROM mf_leader_lease;
