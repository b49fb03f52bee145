-- Has the server look every second, while it runs a statement of this
-- session (a lock wait included), whether the client is still there
-- (client_connection_check_interval, PostgreSQL 14). A backend waiting on a
-- lock reads nothing from its socket: the write of a primary killed or cut
-- off while it waited (on a queue row an operator's open transaction
-- holds) waited on for as long as that lock was held, holding its fence's
-- share lock on the lease row, and every election waited behind it. An
-- older server has no such setting, and one on a system without the
-- kernel's support refuses a value other than 0: both are left as they
-- are.
DO $$
BEGIN
  PERFORM set_config('client_connection_check_interval', '1000', false);
EXCEPTION WHEN undefined_object OR invalid_parameter_value THEN
  NULL;
END
$$
