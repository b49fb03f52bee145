-- Sets the session's parameters named in $1 to the values in $2, once
-- connected rather than with the startup: a connection pooler (PgBouncer)
-- refuses a startup parameter it does not know. A parameter this server
-- does not have (idle_session_timeout before PostgreSQL 14) is left out:
-- the filter is false before set_config is evaluated.
SELECT count(set_config(s.name, s.value, false))
  FROM unnest($1::text[], $2::text[]) AS s(name, value)
 WHERE EXISTS (SELECT 1 FROM pg_settings p WHERE p.name = s.name)
