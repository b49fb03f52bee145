-- A whole ingest batch in one statement: the messages ($1..$6, one array
-- element per message) and their queue rows ($7..$9, one element per
-- delivery: the 1-based position of its message in the batch, destination,
-- lane), in batch order. Set-based rather than a statement per message: under
-- load the per-statement work was most of ingest's cost in the database.
--
-- Message ids are drawn in batch order before the insert, so each queue row
-- can name its message; queue ids are given in delivery order (ORDER BY), so
-- a later message of a lane always has a higher queue id (the lane claim's
-- FIFO argument, (b), relies on it together with message_ingest_lock.sql).
-- Returns, per message in batch order, its id and its queue ids.
WITH input AS (
    SELECT u.ord, nextval((SELECT pg_get_serial_sequence('mf_messages', 'id'))) AS id,
           u.inbound, u.control_id, u.message_type, u.payload, u.status, u.error
      FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::text[], $6::text[])
           WITH ORDINALITY AS u(inbound, control_id, message_type, payload, status, error, ord)
), m AS (
    INSERT INTO mf_messages (id, inbound, control_id, message_type, payload, status, error)
    OVERRIDING SYSTEM VALUE
    SELECT id, inbound, control_id, message_type, payload, status, error
      FROM input
     ORDER BY ord
), q AS (
    INSERT INTO mf_queue (message_id, destination, lane)
    SELECT input.id, d.destination, d.lane
      FROM unnest($7::bigint[], $8::text[], $9::text[]) WITH ORDINALITY AS d(msg, destination, lane, ord)
      JOIN input ON input.ord = d.msg
     ORDER BY d.ord
    RETURNING id, message_id
)
SELECT input.id, COALESCE(array_agg(q.id ORDER BY q.id) FILTER (WHERE q.id IS NOT NULL), '{}'::bigint[])
  FROM input
  LEFT JOIN q ON q.message_id = input.id
 GROUP BY input.ord, input.id
 ORDER BY input.ord
