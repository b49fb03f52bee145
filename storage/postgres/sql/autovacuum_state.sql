-- Whether PostgreSQL vacuums mf's busiest tables by itself: the server's
-- autovacuum (which needs track_counts), and those of this schema's tables
-- that turned it off for themselves (reloptions, stored as written: off, 0,
-- false...; PostgreSQL checked them as booleans when they were set). Every
-- delivery leaves dead row versions in mf_queue, and the purge in both.
SELECT current_setting('autovacuum')::bool AND current_setting('track_counts')::bool,
       COALESCE(array_agg(c.relname::text ORDER BY c.relname)
                    FILTER (WHERE NOT COALESCE((SELECT bool_and(split_part(o, '=', 2)::bool)
                                                  FROM unnest(c.reloptions) o
                                                 WHERE o LIKE 'autovacuum\_enabled=%'), true)),
                '{}')
  FROM pg_class c
 WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())
   AND c.relname IN ('mf_messages', 'mf_queue')
