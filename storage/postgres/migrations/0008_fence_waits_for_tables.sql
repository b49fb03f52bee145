-- The fence waits for the tables before it takes the lease row. A fenced
-- write holds the lease row FOR SHARE from its fence to its commit, and the
-- leader's renewal (an UPDATE of that row) waits for every such holder. A
-- write that took the row and then waited on a maintenance lock of a table
-- (VACUUM FULL, ALTER TABLE, CLUSTER, a plain REINDEX or CREATE INDEX)
-- held the renewal behind it, and the primary fenced itself for as long as
-- the maintenance lasted, each node elected after it in turn. Taking the
-- graph's two tables first, in the mode its writes take them anyway (ROW
-- EXCLUSIVE, which ordinary reads, writes and plain VACUUM do not conflict
-- with), makes a write wait for maintenance before it holds anything the
-- renewal needs. The fence itself is unchanged: the check and the share
-- lock still come before the writes, in the same transaction, after the
-- wait, so a write that waited through an election is refused.
-- mf_config and mf_nodes, which a few rare writes touch (a re-pend bumps
-- the queue's version, the purge deletes old nodes), are not taken: a lock
-- on either would hold every write for a table they mostly do not use.
CREATE OR REPLACE FUNCTION mf_fence(p_owner text, p_term bigint) RETURNS integer
LANGUAGE plpgsql AS $$
BEGIN
    LOCK TABLE mf_messages, mf_queue IN ROW EXCLUSIVE MODE;
    PERFORM 1 FROM mf_leader_lease WHERE name = 'leader' AND owner = p_owner AND term = p_term FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'fenced: the leader lease is not (owner %, term %)', p_owner, p_term USING ERRCODE = 'MF001';
    END IF;
    RETURN 1;
END
$$;
