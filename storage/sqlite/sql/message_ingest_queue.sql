-- One pending queue row of the message just inserted (message_ingest.sql).
-- ?1 message id, ?2 destination, ?3 lane.
INSERT INTO mf_queue (message_id, destination, lane, next_attempt_at, created_at, updated_at)
VALUES (?1, ?2, ?3,
        CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
        CAST(round(unixepoch('subsec') * 1000) AS INTEGER),
        CAST(round(unixepoch('subsec') * 1000) AS INTEGER))
