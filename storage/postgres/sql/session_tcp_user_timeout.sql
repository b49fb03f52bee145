-- Sets tcp_user_timeout ($1, milliseconds) for the session, on a server
-- whose version number is at least $2 (the setting came in PostgreSQL 12).
-- An older server has no such setting and refuses a startup parameter it
-- does not know, so it cannot go with the connection's: there this does
-- nothing (the filter is false before set_config is evaluated).
SELECT set_config('tcp_user_timeout', $1, false)
 WHERE current_setting('server_version_num')::int >= $2::int
