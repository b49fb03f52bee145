-- A consistent copy of the database into a new file (?1, empty or not
-- there): VACUUM INTO reads in one read transaction, so the copy is the
-- database as of one commit, while the engine writes on beside it (in WAL
-- mode a reader blocks no writer). It reads committed pages from the WAL as
-- well as the database file, which a copy of mf.db alone does not.
VACUUM INTO ?
