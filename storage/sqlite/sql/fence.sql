-- The fence, first statement of every fenced transaction. The transaction is
-- BEGIN IMMEDIATE, so it already holds SQLite's single write lock: no
-- election (an UPDATE of this row) can commit between this check and the
-- writes that follow it, and the writes of term T are ordered entirely before
-- term T+1 begins. (PostgreSQL needs FOR SHARE for this; SQLite has one
-- writer at a time.)
SELECT 1 FROM mf_leader_lease WHERE name = 'leader' AND owner = ?1 AND term = ?2
