-- What a backup holds, read from the copy: SQLite's quick_check (one row,
-- 'ok', on a sound file), the messages, the queue rows still to deliver,
-- and the last message and queue ids given out (AUTOINCREMENT's counters:
-- an engine started on the copy gives out ids from there on).
SELECT (SELECT group_concat(quick_check, '; ') FROM pragma_quick_check) AS quick_check,
       (SELECT count(*) FROM mf_messages) AS messages,
       (SELECT count(*) FROM mf_queue WHERE status IN ('pending', 'inflight')) AS unfinished,
       coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'mf_messages'), 0) AS last_message,
       coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'mf_queue'), 0) AS last_queue
