-- A held row is a pending lane head parked by on_exhausted = "block": no
-- claim takes it, so its lane waits for an operator (retry or skip).
ALTER TABLE mf_queue ADD held BIT NOT NULL CONSTRAINT mf_queue_held_df DEFAULT 0;
