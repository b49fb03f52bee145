-- The server process of this session (OwnSessions): the same for every
-- statement of a session of its own, another one now and then behind a
-- pooler that shares sessions between connections.
SELECT pg_backend_pid()
