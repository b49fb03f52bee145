-- What Open verifies on a connection: the settings the DSN asked for really
-- took. WAL in particular can be refused (e.g. on some network file systems)
-- and SQLite then keeps its old journal mode without an error.
SELECT j.journal_mode, s.synchronous, f.foreign_keys, b.timeout
  FROM pragma_journal_mode() j, pragma_synchronous() s, pragma_foreign_keys() f, pragma_busy_timeout() b
