-- attempts_at_retry: see storage/postgres/migrations/0007_attempts_at_retry.sql.
ALTER TABLE mf_queue ADD COLUMN attempts_at_retry INTEGER NOT NULL DEFAULT 0;
