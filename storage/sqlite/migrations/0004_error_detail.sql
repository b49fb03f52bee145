-- A failed delivery's record in two parts: last_error says what failed in the
-- engine's words (the destination, an ACK code, an HTTP status), which a
-- monitoring token may read (GET /lanes); last_error_detail is the
-- destination's own explanation, which may quote the message's fields (PHI),
-- read only with MESSAGE_READ. Rows failed before this migration keep both
-- parts in last_error.
ALTER TABLE mf_queue ADD COLUMN last_error_detail TEXT NOT NULL DEFAULT '';
