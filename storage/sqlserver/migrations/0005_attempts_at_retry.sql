-- attempts_at_retry: see storage/postgres/migrations/0007_attempts_at_retry.sql.
ALTER TABLE mf_queue ADD attempts_at_retry BIGINT NOT NULL CONSTRAINT mf_queue_attempts_at_retry_df DEFAULT 0;
