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
--
-- A row an operator's trigger skipped (a BEFORE INSERT trigger returning
-- NULL) fails the whole statement, and so the batch: the message row of an
-- unrouted message has no queue row to trip the foreign key, and its id was
-- returned all the same, so its sender was answered AA with nothing stored.
-- The batch fails whole, so counting the rows each insert returned against
-- what it was given is enough (uncorrelated subqueries, run once). SQL has
-- no RAISE: the error is a cast of a text that names it, evaluated only when
-- a count falls short (CASE, and the text is not a constant, so the planner
-- does not fold it), which refusal() recognises (skippedRowMark).
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
    RETURNING id
), q AS (
    INSERT INTO mf_queue (message_id, destination, lane)
    SELECT input.id, d.destination, d.lane
      FROM unnest($7::bigint[], $8::text[], $9::text[]) WITH ORDINALITY AS d(msg, destination, lane, ord)
      JOIN input ON input.ord = d.msg
     ORDER BY d.ord
    RETURNING id, message_id
)
SELECT CASE WHEN (SELECT count(*) FROM m) = (SELECT count(*) FROM input)
             AND (SELECT count(*) FROM q) = COALESCE(cardinality($7::bigint[]), 0)
            THEN input.id
            ELSE ('mf: a trigger skipped a row of message ' || input.id)::bigint
       END,
       COALESCE(array_agg(q.id ORDER BY q.id) FILTER (WHERE q.id IS NOT NULL), '{}'::bigint[])
  FROM input
  LEFT JOIN q ON q.message_id = input.id
 GROUP BY input.ord, input.id
 ORDER BY input.ord
