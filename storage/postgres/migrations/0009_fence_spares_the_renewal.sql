-- The fence holds the lease row FOR KEY SHARE instead of FOR SHARE, and term
-- becomes a key column (a unique index), so that the fence still stops an
-- election but no longer stops the leader's own renewal.
--
-- A fenced write holds the lease row from its fence to its commit. FOR
-- SHARE conflicts with every UPDATE of the row, the renewal's included, so
-- a write that waited on anything (a row an operator's open session had
-- locked, a slow statement) held the renewal behind it, and the primary
-- fenced itself. FOR KEY SHARE conflicts only with an UPDATE that changes a
-- key column (one of a unique index that a foreign key could use) or a
-- DELETE. With term unique, an election (term + 1) is such an UPDATE,
-- whatever version of mf sends it: it waits for every fenced write in
-- progress and takes the row before any later fence check can, so the
-- writes of term T still commit before term T+1 begins. A renewal and a
-- resignation change expires_at only, and wait for none of them.
--
-- The row is one: the index only gives term the standing of a key.
CREATE UNIQUE INDEX mf_leader_lease_term ON mf_leader_lease (term);

CREATE OR REPLACE FUNCTION mf_fence(p_owner text, p_term bigint) RETURNS integer
LANGUAGE plpgsql AS $$
BEGIN
    LOCK TABLE mf_messages, mf_queue IN ROW EXCLUSIVE MODE;
    PERFORM 1 FROM mf_leader_lease WHERE name = 'leader' AND owner = p_owner AND term = p_term FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'fenced: the leader lease is not (owner %, term %)', p_owner, p_term USING ERRCODE = 'MF001';
    END IF;
    RETURN 1;
END
$$;
