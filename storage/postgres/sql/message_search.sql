-- An operator's search (storage.Store.MessageSearch): one page of messages,
-- newest first, each with its queue rows (metadata only, never a payload),
-- from one snapshot.
--
-- It is always bounded by the window $1 <= received_at < $2 and walks the
-- received_at index backwards from the top of it: ORDER BY received_at, not
-- id, so that the plan cannot be a walk down the primary key filtering on
-- received_at (with LIMIT, PostgreSQL may think that cheap, and for an
-- old window it reads every newer row first). The filters ($3 control id,
-- $4 inbound, $5 status; '' is none) are checked on the rows of the window:
-- a search for one control id reads the window's rows, and no more.
--
-- $6 is the cursor, the last message of the page before (MaxInt64: none):
-- the rows after it in (received_at, id) descending order. Its received_at
-- is read by primary key and bounds the index scan; if it is gone (purged),
-- the page is the lower ids of the window. $7 is the page's size.
WITH cursor_at AS (
    SELECT received_at FROM mf_messages WHERE id = $6
), page AS (
    SELECT m.id, m.inbound, m.received_at, m.control_id, m.message_type, m.status, m.error
      FROM mf_messages m
     WHERE m.received_at >= $1 AND m.received_at < $2
       AND m.received_at <= COALESCE((SELECT received_at FROM cursor_at), $2)
       AND (m.received_at < (SELECT received_at FROM cursor_at) OR m.id < $6)
       AND ($3 = '' OR m.control_id = $3)
       AND ($4 = '' OR m.inbound = $4)
       AND ($5 = '' OR m.status = $5)
     ORDER BY m.received_at DESC, m.id DESC
     LIMIT $7
)
SELECT p.id, p.inbound, p.received_at, p.control_id, p.message_type, p.status, p.error,
       q.id, q.destination, q.status
  FROM page p
  LEFT JOIN mf_queue q ON q.message_id = p.id
 ORDER BY p.received_at DESC, p.id DESC, q.id
