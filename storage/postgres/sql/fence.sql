-- The fence (migration 0003's mf_fence): raises SQLSTATE MF001 unless the
-- lease row is (owner $1, term $2), and holds that row FOR SHARE until the
-- surrounding transaction ends, so an election (an UPDATE of the row) cannot
-- commit between this check and the writes that follow it: the writes of
-- term T are ordered entirely before term T+1 begins. Shared locks do not
-- block each other, so concurrent fenced writers of the same term do not
-- serialise here.
SELECT mf_fence($1, $2)
