-- A held row is a pending lane head parked by on_exhausted = "block": no
-- claim takes it, so its lane waits for an operator (retry or skip).
ALTER TABLE mf_queue ADD COLUMN held INTEGER NOT NULL DEFAULT 0 CHECK (held IN (0, 1));
