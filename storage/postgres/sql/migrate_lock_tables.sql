-- Before pending migrations change a schema in use: the graph's two tables,
-- in the order the fence takes them (migration 0008), all at once. A
-- migration that took them in its own order (0004 alters mf_queue, then
-- locks mf_messages) could deadlock with a write of a primary still running
-- (a rolling upgrade) that held mf_messages and waited for mf_queue, and
-- PostgreSQL failed one of the two. Taken in the fence's order, the
-- migration waits for the writes under way, holding nothing they need, and
-- the writes that come after wait for the migration.
LOCK TABLE mf_messages, mf_queue IN ACCESS EXCLUSIVE MODE
