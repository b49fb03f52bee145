-- attempts_at_retry is a row's attempts when an operator last retried it
-- (queue_release.sql), 0 if never: the destination's max_attempts counts
-- the attempts made since, so a retried head gets a fresh set before it is
-- held again. attempts itself only grows: it tells a stale claim from a
-- current one (storage.Claim) and is the total the API shows.
ALTER TABLE mf_queue ADD COLUMN attempts_at_retry bigint NOT NULL DEFAULT 0;
