-- An operator's search (storage.Store.MessageSearch): one page of messages,
-- newest first, each with its queue rows, from one snapshot; see
-- storage/postgres/sql/message_search.sql. ?1 <= received_at < ?2 (Unix
-- milliseconds) bounds the walk of mf_messages_received_at, which holds the
-- id too (the rowid), so the index gives the order (received_at, id) itself.
-- ?3 control id, ?4 inbound, ?5 status ('' is none); ?6 the cursor
-- (MaxInt64: none); ?7 the page's size.
WITH cursor_at AS (
    SELECT received_at FROM mf_messages WHERE id = ?6
), page AS (
    SELECT m.id, m.inbound, m.received_at, m.control_id, m.message_type, m.status, m.error
      FROM mf_messages m
     WHERE m.received_at >= ?1 AND m.received_at < ?2
       AND m.received_at <= COALESCE((SELECT received_at FROM cursor_at), ?2)
       AND (m.received_at < (SELECT received_at FROM cursor_at) OR m.id < ?6)
       AND (?3 = '' OR m.control_id = ?3)
       AND (?4 = '' OR m.inbound = ?4)
       AND (?5 = '' OR m.status = ?5)
     ORDER BY m.received_at DESC, m.id DESC
     LIMIT ?7
)
SELECT p.id, p.inbound, p.received_at, p.control_id, p.message_type, p.status, p.error,
       q.id, q.destination, q.status
  FROM page p
  LEFT JOIN mf_queue q ON q.message_id = p.id
 ORDER BY p.received_at DESC, p.id DESC, q.id
