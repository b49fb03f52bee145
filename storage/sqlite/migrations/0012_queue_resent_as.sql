-- resent_as: see storage/postgres/migrations/0014_queue_resent_as.sql.
ALTER TABLE mf_queue ADD COLUMN resent_as INTEGER;
