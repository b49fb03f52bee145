-- The messages that never had a queue row (unrouted, rejected; and those
-- an older mf's purge left behind) are found by a walk of mf_messages in id
-- order from where the last walk stopped, kept in mf_config as the version
-- of 'message_purge_walked' (the highest id walked past; ids are never
-- reused: AUTOINCREMENT). This reads the next step of it: at most ?2
-- messages, up to the first one not past the cut-off (?1 its age in
-- milliseconds; ids come in ingest order, and so, SQLite having one writer,
-- do received_at). Returns the range walked past, (from, to], and how many
-- messages it holds: message_purge_walked.sql deletes those of them with
-- no queue row, and message_purge_walk_mark.sql moves the mark to its end,
-- in the same write transaction. So each message is walked past once in
-- its life, and a backlog past the cut-off (a destination blocked for
-- days) is not walked again at every hourly purge, in one write
-- transaction that every ingest waited for, as the walk from the oldest
-- message past the cut-off did.
WITH mark (id) AS (
    SELECT coalesce((SELECT version FROM mf_config WHERE name = 'message_purge_walked'), 0)
), walk AS MATERIALIZED (
    SELECT m.id, m.received_at < CAST(round(unixepoch('subsec') * 1000) AS INTEGER) - ?1 AS aged
      FROM mf_messages m
     WHERE m.id > (SELECT id FROM mark)
     ORDER BY m.id
     LIMIT ?2
), passed AS (
    SELECT w.id FROM walk w
     WHERE w.id < coalesce((SELECT min(n.id) FROM walk n WHERE NOT n.aged), 9223372036854775807)
)
SELECT (SELECT id FROM mark), coalesce(max(p.id), (SELECT id FROM mark)), count(*)
  FROM passed p
