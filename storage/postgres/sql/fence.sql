-- The fence. FOR SHARE holds the lease row until the surrounding transaction
-- ends, so an election (an UPDATE of this row) cannot commit between this
-- check and the writes that follow it: the writes of term T are ordered
-- entirely before term T+1 begins. Shared locks do not block each other, so
-- concurrent fenced writers of the same term do not serialise here.
SELECT 1 FROM mf_leader_lease WHERE name = 'leader' AND owner = $1 AND term = $2 FOR SHARE
