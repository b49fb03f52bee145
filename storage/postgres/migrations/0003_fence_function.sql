-- The fence as a function that raises instead of returning no row, so that a
-- fenced write can be sent as one pipelined batch (fence, then the writes,
-- in one implicit transaction, one round trip): a failed fence aborts the
-- batch's transaction before any write of it runs. FOR SHARE holds the lease
-- row until that transaction ends, exactly as the plain SELECT did: an
-- election (an UPDATE of the row) cannot commit between the check and the
-- writes. SQLSTATE MF001 is mapped to storage.ErrFenced.
CREATE OR REPLACE FUNCTION mf_fence(p_owner text, p_term bigint) RETURNS integer
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM mf_leader_lease WHERE name = 'leader' AND owner = p_owner AND term = p_term FOR SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'fenced: the leader lease is not (owner %, term %)', p_owner, p_term USING ERRCODE = 'MF001';
    END IF;
    RETURN 1;
END
$$;
