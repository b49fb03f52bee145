-- Reachable and migrated: the lease row exists only after the first
-- migration. And writable: a standby, or a database set read-only, answers
-- reads but no write of mf's.
SELECT count(*), current_setting('transaction_read_only') = 'on' FROM mf_leader_lease
