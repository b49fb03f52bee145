-- Followers wait on this channel for lease_resign.sql's notification; its
-- payload is the schema of the resigned lease.
LISTEN mf_leader_resigned
