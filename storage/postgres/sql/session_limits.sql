-- The limits on the sessions of this role and this database: their
-- CONNECTION LIMIT (-1: none), and the sessions a role without superuser
-- may open on the server (max_connections less those kept for superusers).
SELECT (SELECT rolconnlimit FROM pg_roles WHERE rolname = current_user),
       (SELECT datconnlimit FROM pg_database WHERE datname = current_database()),
       current_user,
       current_database(),
       current_setting('max_connections')::int
         - CASE WHEN (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN 0
                ELSE current_setting('superuser_reserved_connections')::int END
