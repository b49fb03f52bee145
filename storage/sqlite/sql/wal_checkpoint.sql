-- One PASSIVE checkpoint (see checkpoint.go): copies WAL pages into the
-- database file without blocking readers or the writer. Returns busy, the
-- WAL's frames and the frames now checkpointed.
PRAGMA wal_checkpoint(PASSIVE)
