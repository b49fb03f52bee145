-- Whether this role may change mf_queue (it owns it, or is a member of the
-- role that does; a superuser may): only such a role takes the tables
-- before the migrations (migrate_lock_tables.sql).
SELECT pg_has_role(tableowner, 'USAGE')
  FROM pg_tables
 WHERE schemaname = current_schema() AND tablename = 'mf_queue'
