-- Makes the session's commits durable before they are acknowledged. A
-- synchronous_commit of off (the role's, the database's, the server's or
-- the store url's) acknowledges a commit before its WAL is flushed: a
-- crash of the server then loses messages mf has answered AA. Every other
-- value flushes locally first, and is left as set (remote_apply and the
-- like are the DBA's choice). Returns whether fsync is on, which no session
-- can change, and whether synchronous_commit was off. OFFSET 0 keeps the
-- settings read before set_config changes one.
SELECT s.fsync_on,
       s.commit_off,
       CASE WHEN s.commit_off THEN set_config('synchronous_commit', 'on', false) END
  FROM (SELECT current_setting('fsync') = 'on' AS fsync_on,
               current_setting('synchronous_commit') = 'off' AS commit_off
        OFFSET 0) s
